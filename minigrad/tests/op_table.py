"""The op table: one expression per operation (and a few compositions), with its inputs.

Each entry is (fn(lib, *tensors), input arrays), `lib` offering the calls whose
spelling differs between minigrad and torch (torch_compare.py).
"""

import numpy as np

rng = np.random.default_rng(0)


def arr(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape)


# name -> (expression over a library and tensors, input arrays)
CASES = {
    "add_broadcast": (lambda L, a, b: a + b, [arr(3, 4), arr(4)]),
    "sub_broadcast": (lambda L, a, b: a - b, [arr(2, 1, 4), arr(3, 1)]),
    "mul_broadcast_and_scalar": (lambda L, a, b: 3.0 * a * b, [arr(3, 4), arr(3, 1)]),
    "div": (lambda L, a, b: a / b, [arr(3, 4), arr(3, 4, low=0.5, high=2.0)]),
    "pow_scalar_exponent": (lambda L, a: a ** 3, [arr(5)]),
    "pow_tensor_exponent": (lambda L, a, b: a ** b, [arr(4, low=0.5, high=2.0), arr(4)]),
    "neg": (lambda L, a: -a, [arr(2, 3)]),
    "matmul_2d": (lambda L, a, b: a @ b, [arr(3, 4), arr(4, 5)]),
    "matmul_batched_broadcast": (lambda L, a, b: a @ b, [arr(2, 3, 4), arr(4, 2)]),
    "matmul_vector": (lambda L, a, b: a @ b, [arr(4), arr(2, 4, 3)]),
    "matmul_matrix_vector": (lambda L, a, b: a @ b, [arr(3, 4), arr(4)]),
    "matmul_vector_4d": (lambda L, a, b: a @ b, [arr(4), arr(2, 2, 4, 3)]),
    "sum_dim": (lambda L, a: a.sum(dim=1), [arr(3, 4, 2)]),
    "sum_keepdim_all": (lambda L, a: a.sum() + a.sum(dim=0, keepdim=True), [arr(3, 4)]),
    "mean": (lambda L, a: a.mean(dim=-1) * a.mean(), [arr(3, 4)]),
    "max_dim": (lambda L, a: a.max(1).values, [arr(4, 5)]),
    "max_all": (lambda L, a: a.max(), [arr(4, 5)]),
    "exp": (lambda L, a: a.exp(), [arr(3, 4)]),
    "log": (lambda L, a: a.log(), [arr(3, 4, low=0.1, high=3.0)]),
    "relu": (lambda L, a: L.relu(a), [arr(4, 5)]),
    "tanh": (lambda L, a: a.tanh(), [arr(3, 4)]),
    "sigmoid": (lambda L, a: a.sigmoid(), [arr(3, 4, low=-8, high=8)]),
    "reshape": (lambda L, a: a.reshape(4, 3) * a.reshape(-1)[:12].reshape(4, 3), [arr(2, 6)]),
    "transpose": (lambda L, a: a.transpose(0, 2) * a, [arr(2, 3, 2)]),
    "T": (lambda L, a: a.T @ a, [arr(3, 2)]),
    "index_slice": (lambda L, a: a[1:, ::2], [arr(3, 5)]),
    "index_repeated": (lambda L, a: a[np.array([0, 2, 0, 0])], [arr(3, 4)]),
    "softmax": (lambda L, a: L.softmax(a, dim=0), [arr(4, 3)]),
    "log_softmax": (lambda L, a: L.log_softmax(a, dim=-1), [arr(3, 5)]),
    "cross_entropy": (lambda L, a: L.cross_entropy(a, np.array([1, 0, 4])), [arr(3, 5)]),
    "linear": (lambda L, x, w, b: L.linear(x, w, b), [arr(3, 4), arr(5, 4), arr(5)]),
    "linear_3d_input": (lambda L, x, w, b: L.linear(x, w, b), [arr(2, 3, 4), arr(5, 4), arr(5)]),
    "linear_1d_input": (lambda L, x, w, b: L.linear(x, w, b), [arr(4), arr(5, 4), arr(5)]),
    # A shared subexpression: d reaches the output along two paths.
    "diamond": (lambda L, a, b: (lambda d: d.exp() * d + d.tanh())(a * b + a), [arr(3, 4), arr(3, 4)]),
    # Comparison masks (no gradient of their own): batched by vmap, traced by hlo.
    # detach: the same values (batched by vmap, traced by hlo), no gradient through one factor.
    "detach": (lambda L, a: a * a.detach().exp(), [arr(3, 4)]),
    "compare_mask": (lambda L, a, b: a * (a > b) + b * (a <= b) * (a != 0.5), [arr(3, 4), arr(4)]),
    # (last: each entry draws its inputs in turn. abs times a: a second derivative, 2 sign(a),
    # through abs's gradient rule)
    "abs": (lambda L, a: a.abs() * a, [arr(3, 4)]),
    "sign": (lambda L, a: a.sign() * a.exp(), [arr(3, 4)]),
    # attention's pieces: masking out of place, heads' dims moved, a norm's square root
    "where": (lambda L, a, b: L.where(a > b, a * 2.0, b.exp()), [arr(3, 4), arr(4)]),
    "masked_fill": (lambda L, a, b: L.softmax(a.masked_fill(b > 0.5, -3.0), dim=-1) * b, [arr(3, 4), arr(4)]),
    "permute_unsqueeze": (lambda L, a: a.permute(2, 0, 1).unsqueeze(1).exp()
                          * a.sum(1).T.unsqueeze(1).unsqueeze(-1), [arr(2, 3, 4)]),
    "sqrt": (lambda L, a: a.sqrt(), [arr(3, 4, low=0.5, high=2.0)]),
    "clamp": (lambda L, a: a.clamp(-1.0, 1.0) * a.clamp(min=0.5).exp() + a.clamp(max=-0.5) ** 2,
              [arr(3, 4)]),
}
