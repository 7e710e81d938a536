"""Mutation check of minigrad's tests: do they catch small bugs in ops.py, functional.py and tensor.py?

    ./bazelw run //minigrad:mutation -- --max 80 --jobs 2

The engine is tools/mutation_check.py; this file names what it mutates and runs.
"""

from mutation_check import Named, main, package_dir

FILES = ["ops.py", "functional.py", "tensor.py"]
TESTS = ["gradients_test.py", "semantics_test.py", "dtypes_test.py", "autograd_test.py",
         "properties_test.py", "func_test.py", "compositions_test.py", "hlo_test.py"]

# The mutants a mutation check of the earlier suite let through (issue 12).
NAMED = [
    Named("ops.py", "    return out, mask / mask.sum(axis=dim, keepdims=True)",
          "    return out, mask * 1.0", "max() ties: gradient 1.0 to each tie"),
    Named("functional.py",
          "            g_grad = ((probs - onehot(target, n, logits.shape[1], probs.dtype)) * g).sum() / n",
          "            g_grad = -((probs - onehot(target, n, logits.shape[1], probs.dtype)) * g).sum() / n",
          "cross_entropy double-backward: sign of d/dgrad"),
    Named("functional.py", "        return grad - out.exp() * grad.sum(ctx.dim, keepdim=True), None",
          "        return grad, None", "log_softmax backward without its softmax term"),
]

if __name__ == "__main__":
    main(package_dir("minigrad", __file__), FILES, TESTS, NAMED, __doc__)
