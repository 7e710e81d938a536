"""An FX pass that puts the kernels operators in place of a model's softmax.

    from kernels.fx import use_warp_softmax
    gm = torch.fx.symbolic_trace(model)      # or the graph Dynamo hands a backend (backend.py)
    report = use_warp_softmax(gm)            # rewrites gm in place, recompiles it
    print(report)                            # what it replaced, what it left and why

It replaces torch.softmax, F.softmax, Tensor.softmax, nn.Softmax, the log-softmax
forms, the aten forms (_softmax, softmax.int, _safe_softmax and the log ones) and a
decomposed exp(z) / exp(z).sum(dim, keepdim=True). With decompose_sdpa=True it
also rewrites scaled_dot_product_attention (which has no softmax node) as
matmul, warp_softmax, matmul. The replacements keep torch's semantics: the dim,
the dtype argument (the input is cast first, as torch does) and autocast (torch
runs softmax in its input dtype under CPU autocast and in float32 under CUDA
autocast, where the kernels operators alone would take the autocast dtype).
"""

import dataclasses
import operator

import torch
import torch.nn.functional as F

from kernels import ops

aten = torch.ops.aten


def _call(x, dim, dtype, log):
    if dtype is not None:
        x = x.to(dtype)  # torch casts the input before the softmax
    device = x.device.type
    if not torch.is_autocast_enabled(device):
        return ops.warp_log_softmax(x, dim) if log else ops.warp_softmax(x, dim)
    if device == "cuda" and dtype is None and x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()  # CUDA autocast's policy for softmax: float32
    with torch.autocast(device, enabled=False):  # CPU autocast's: the input's dtype
        return ops.warp_log_softmax(x, dim) if log else ops.warp_softmax(x, dim)


def softmax(x, dim, dtype=None):
    """torch.softmax(x, dim, dtype) computed by kernels.warp_softmax."""
    return _call(x, dim, dtype, False)


def log_softmax(x, dim, dtype=None):
    """torch.log_softmax(x, dim, dtype) computed by kernels.warp_log_softmax."""
    return _call(x, dim, dtype, True)


def _fusable(x, mask):
    """Whether kernels.warp_softmax_masked(x, mask) computes softmax(x * c + mask)
    as torch would: a float x on the CPU and a float mask that broadcasts to x."""
    if not (x.dtype.is_floating_point and x.device.type == "cpu"):
        return False
    if mask is None:
        return True
    if not (isinstance(mask, torch.Tensor) and mask.dtype.is_floating_point and mask.device == x.device):
        return False  # a bool mask would be added as 0/1, which the operator's bool mask is not
    return mask.dim() <= x.dim() and all(
        m == 1 or m == s for m, s in zip(reversed(mask.shape), reversed(x.shape)))


def _masked(x, mask, dim, mul, div, over_x):
    """softmax(x * mul + mask) (or x / div; mask may be None) by one
    kernels.warp_softmax_masked call where that operator applies (_fusable),
    written over x if over_x and nothing needs x kept (no grad, x's dtype
    unchanged); elsewhere torch's ops, as the graph had them."""
    if _fusable(x, mask):
        scale = mul if mul is not None else 1.0 / div if div is not None else 1.0
        grad = torch.is_grad_enabled() and (x.requires_grad or (mask is not None and mask.requires_grad))
        keeps_dtype = mask is None or torch.result_type(x, mask) == x.dtype
        op = ops.warp_softmax_masked_ if over_x and not grad and keeps_dtype else ops.warp_softmax_masked
        if torch.is_autocast_enabled("cpu"):  # CPU autocast's policy for softmax: the input's dtype
            with torch.autocast("cpu", enabled=False):
                return op(x, mask, scale, dim)
        return op(x, mask, scale, dim)
    z = x if mul is None else x * mul
    z = z if div is None else z / div
    return softmax(z if mask is None else z + mask, dim)


def masked_softmax(x, mask, dim, mul=None, div=None):
    """torch.softmax(x * mul + mask, dim) (or x / div; mask may be None) by
    kernels.warp_softmax_masked, in one pass over x; where that operator does
    not apply (see _fusable) torch's ops, as the graph had them."""
    return _masked(x, mask, dim, mul, div, over_x=False)


def masked_softmax_over_scores(x, mask, dim, mul=None, div=None):
    """masked_softmax written over x, for scores nothing else reads (the pass
    checks): no result to allocate. Where x requires grad, or the result's dtype
    is not x's, it is masked_softmax."""
    return _masked(x, mask, dim, mul, div, over_x=True)


def safe_softmax(x, dim, dtype=None):
    """aten._safe_softmax: softmax, but rows that are all -inf give 0, not NaN."""
    y = softmax(x, dim, dtype)
    return torch.where((x == float("-inf")).all(dim, keepdim=True), torch.zeros_like(y), y)


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention without dropout, its softmax by warp_softmax.

    Fully masked rows give 0, as SDPA's CPU kernels do (hence safe_softmax)."""
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.size(-1) ** -0.5 if scale is None else scale)
    if is_causal:
        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    return torch.matmul(safe_softmax(scores, -1), v)


# The patterns, one row each: target -> (name, replacement, parameter names of its
# positional arguments). A call_method's first argument is the tensor.
_PATTERNS = {
    torch.softmax: ("torch.softmax", softmax, ("input", "dim", "dtype")),
    torch.special.softmax: ("torch.special.softmax", softmax, ("input", "dim", "dtype")),
    F.softmax: ("F.softmax", softmax, ("input", "dim", "_stacklevel", "dtype")),
    "softmax": ("Tensor.softmax", softmax, ("input", "dim", "dtype")),
    torch.nn.Softmax: ("nn.Softmax", softmax, ("input",)),
    aten._softmax.default: ("aten._softmax", softmax, ("input", "dim", "half_to_float")),
    aten.softmax.int: ("aten.softmax", softmax, ("input", "dim", "dtype")),
    aten._safe_softmax.default: ("aten._safe_softmax", safe_softmax, ("input", "dim", "dtype")),
    torch.log_softmax: ("torch.log_softmax", log_softmax, ("input", "dim", "dtype")),
    torch.special.log_softmax: ("torch.special.log_softmax", log_softmax, ("input", "dim", "dtype")),
    F.log_softmax: ("F.log_softmax", log_softmax, ("input", "dim", "_stacklevel", "dtype")),
    "log_softmax": ("Tensor.log_softmax", log_softmax, ("input", "dim", "dtype")),
    torch.nn.LogSoftmax: ("nn.LogSoftmax", log_softmax, ("input",)),
    aten._log_softmax.default: ("aten._log_softmax", log_softmax, ("input", "dim", "half_to_float")),
    aten.log_softmax.int: ("aten.log_softmax", log_softmax, ("input", "dim", "dtype")),
}
_SDPA = (torch._C._nn.scaled_dot_product_attention, aten.scaled_dot_product_attention.default)
_SDPA_PARAMS = ("q", "k", "v", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")

# The decomposed softmax's pieces, under every spelling a graph may use.
_ROLES = {
    torch.exp: "exp", "exp": "exp", aten.exp.default: "exp",
    torch.sum: "sum", "sum": "sum", aten.sum.dim_IntList: "sum",
    operator.truediv: "div", torch.div: "div", "div": "div", aten.div.Tensor: "div",
    operator.sub: "sub", torch.sub: "sub", "sub": "sub", aten.sub.Tensor: "sub",
    operator.add: "add", torch.add: "add", "add": "add", aten.add.Tensor: "add",
    operator.mul: "mul", torch.mul: "mul", "mul": "mul", aten.mul.Tensor: "mul",
    torch.amax: "amax", "amax": "amax", aten.amax.default: "amax",
}


@dataclasses.dataclass
class Change:
    node: str      # the graph node's name
    pattern: str   # e.g. "F.softmax", "exp / sum"
    detail: str    # for a replacement, what it became; for a node left, why


@dataclasses.dataclass
class Report:
    replaced: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = ["warp_softmax pass: %d replaced, %d left" % (len(self.replaced), len(self.left))]
        lines += ["  replaced %s (%s): %s" % (c.node, c.pattern, c.detail) for c in self.replaced]
        lines += ["  left     %s (%s): %s" % (c.node, c.pattern, c.detail) for c in self.left]
        return "\n".join(lines)


def _key(gm, node):
    if node.op == "call_module":
        return type(gm.get_submodule(node.target))
    if node.op in ("call_function", "call_method"):
        return node.target
    return None


def _bind(node, params):
    bound = dict(zip(params, node.args))
    bound.update(node.kwargs)
    return bound


def _meta(node):
    """The example tensor Dynamo, make_fx or ShapeProp recorded for `node`, if any."""
    val = node.meta.get("val", node.meta.get("example_value"))
    return val if isinstance(val, torch.Tensor) else None


def _unsupported_input(x):
    """Why warp_softmax cannot take the tensor `x` stands for, or None."""
    val = _meta(x) if isinstance(x, torch.fx.Node) else None
    if val is None:
        return None
    if not val.dtype.is_floating_point:
        return "input dtype %s: torch.softmax needs a floating point input too" % val.dtype
    if val.device.type == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key(
            "kernels::warp_softmax", "CUDA"):
        return "CUDA input: this build of the kernels has no CUDA kernels"
    if val.device.type not in ("cpu", "cuda"):
        return "device %s: the kernels run on CPU and CUDA" % val.device.type
    return None


def _softmax_call(gm, node, params):
    """(input, dim, dtype) of a softmax-like call, or a string saying why it stays."""
    args = _bind(node, params)
    if node.op == "call_module":
        args["dim"] = gm.get_submodule(node.target).dim
    if args.get("half_to_float"):
        args["dtype"] = torch.float32
    dim, dtype = args.get("dim"), args.get("dtype")
    if dim is None:
        return "dim=None: torch picks an implicit dim from the rank (deprecated); give dim"
    if not isinstance(dim, int):
        return "dim %r is not a constant int" % (dim,)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        return "dtype %r is not a floating point torch.dtype" % (dtype,)
    return _unsupported_input(args["input"]) or (args["input"], dim, dtype)


def _single_dim(dim):
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    return dim if isinstance(dim, int) else None


def _decomposed(node):
    """For div(a, sum(a, dim, keepdim=True)): (z, dim) where a = exp(z), or why it stays;
    None when `node` is not such a div."""
    if not _role(node, "div"):
        return None
    if len(node.args) != 2 or node.kwargs.get("rounding_mode") is not None:
        return None
    num, den = node.args
    if not (_role(den, "sum") and den.args and _same_value(den.args[0], num)):
        return None
    args = _bind(den, ("input", "dim", "keepdim", "dtype"))
    dim = _single_dim(args.get("dim"))
    if dim is None:
        return "sum over dims %r: warp_softmax normalizes along one dim" % (args.get("dim"),)
    if not args.get("keepdim") or args.get("dtype") is not None:
        return "sum without keepdim=True or with a dtype: not a softmax's normalizer"
    if not _role(num, "exp"):
        return "numerator %s is not exp(z) (a masked or clamped exp?): cannot prove it a softmax" % num.name
    z = num.args[0] if num.args else num.kwargs["input"]
    return _unsupported_input(z) or (_unshifted(z, dim), dim)


def _same_value(a, b):
    """a is b, or both are exp of one node (x.exp() / x.exp().sum(...) traces two)."""
    return a is b or (_role(a, "exp") and _role(b, "exp") and a.args[:1] == b.args[:1]
                      and not a.kwargs and not b.kwargs)


def _role(node, role):
    return isinstance(node, torch.fx.Node) and node.op in ("call_function", "call_method") \
        and _ROLES.get(node.target) == role


def _unshifted(z, dim):
    """x where z = x - x.amax(dim, keepdim=True) (softmax(z) = softmax(x)), else z."""
    if _role(z, "sub") and len(z.args) == 2 and not z.kwargs:
        x, m = z.args
        if _role(m, "amax") and m.args and m.args[0] is x:
            args = _bind(m, ("input", "dim", "keepdim"))
            if _single_dim(args.get("dim")) == dim and args.get("keepdim"):
                return x
    return z


def _number(c):
    """A constant number, or a node Dynamo recorded as one (with dynamic=True it
    traces a module's float attribute, BERT's attention scaling, as a SymFloat)."""
    if isinstance(c, torch.fx.Node):
        c = c.meta.get("val", c.meta.get("example_value"))
        return isinstance(c, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(c, bool)
    return isinstance(c, (int, float)) and not isinstance(c, bool)


def _scaling(node):
    """(x, mul, div) for node = x * c, c * x or x / c with c a constant number, else None."""
    if not (isinstance(node, torch.fx.Node) and len(node.args) == 2 and not node.kwargs):
        return None
    a, b = node.args
    tensor = lambda t: isinstance(t, torch.fx.Node) and not _number(t)  # noqa: E731
    if _role(node, "mul") and _number(b) and tensor(a):
        return a, b, None
    if _role(node, "mul") and _number(a) and tensor(b):
        return b, a, None
    if _role(node, "div") and _number(b) and tensor(a) and not (isinstance(b, (int, float)) and b == 0):
        return a, None, b  # x / 0 stays: it is no x * (1 / 0), which Python refuses to compute
    return None


def _attention_form(z):
    """For a softmax input z = x * c + mask (x / c, c * x, mask + ..., either
    term alone): (x, mask, mul, div, the nodes the fused call makes dead), or None.
    The sum is folded only where the softmax is its one user; with example
    values (Dynamo's graphs) only a mask the operator takes (_fusable)."""
    x, mask, scaled = z, None, _scaling(z)
    if _role(z, "add") and len(z.args) == 2 and not z.kwargs and len(z.users) == 1:
        a, b = z.args
        if _scaling(b) and not _scaling(a):
            a, b = b, a
        if isinstance(b, torch.fx.Node):
            x, mask, scaled = a, b, _scaling(a)
    if scaled is not None and (mask is not None or len(z.users) == 1):
        x, mul, div = scaled[0], scaled[1], scaled[2]
    elif mask is not None:
        mul = div = None
    else:
        return None
    xv, mv = _meta(x), _meta(mask) if mask is not None else None
    if xv is not None and (mask is None or mv is not None) and not _fusable(xv, mv):
        return None
    return x, mask, mul, div, [z] + ([z.args[0], z.args[1]] if mask is not None else [])


def _erase_dead(gm, nodes):
    for node in dict.fromkeys(nodes):  # in order, once each
        if isinstance(node, torch.fx.Node) and not node.users and node.op in (
                "call_function", "call_method", "call_module"):
            gm.graph.erase_node(node)


def _replace(gm, node, fn, args):
    with gm.graph.inserting_before(node):
        new = gm.graph.call_function(fn, args)
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)


# Calls whose result is new memory, never a view of an argument: a softmax may
# write over such scores when nothing else reads them.
_FRESH = {("call_function", torch.matmul), ("call_function", operator.matmul),
          ("call_function", torch.bmm), ("call_function", torch.baddbmm),
          ("call_method", "matmul"), ("call_method", "bmm"),
          ("call_function", aten.bmm.default), ("call_function", aten.baddbmm.default)}


def _scores_only_for(x, folded, node):
    """Whether x is new memory that only the softmax `node` (or the sum folded into it) reads."""
    return (isinstance(x, torch.fx.Node) and (x.op, x.target) in _FRESH and len(x.users) == 1
            and next(iter(x.users)) in set(folded) | {node})


def _fuse(gm, node, name, z, dim, report, dead=()):
    """Replaces the softmax `node` of z = x * c + mask by masked_softmax (or,
    over scores nothing else reads, masked_softmax_over_scores) if z has that
    form (_attention_form); returns whether it did."""
    form = _attention_form(z)
    if form is None:
        return False
    x, mask, mul, div, folded = form
    fn = masked_softmax_over_scores if _scores_only_for(x, folded, node) else masked_softmax
    _replace(gm, node, fn, (x, mask, dim, mul, div))
    _erase_dead(gm, list(dead) + folded)
    report.replaced.append(Change(node.name, name, "%s(dim=%d, %s%s)" % (
        fn.__name__, dim, "mask=%s, " % mask.name if mask is not None else "",
        "scale=%s" % mul if mul is not None else "scale=1/%s" % div if div is not None else "scale=1")))
    return True


def use_warp_softmax(gm, decompose_sdpa=False):
    """Replaces gm's softmax calls by the kernels operators, in place; returns a Report."""
    report = Report()
    for node in list(gm.graph.nodes):
        key = _key(gm, node)
        row = _PATTERNS.get(key) if key is not None else None
        if row is not None:
            name, fn, params = row
            call = _softmax_call(gm, node, params)
            if isinstance(call, str):
                report.left.append(Change(node.name, name, call))
                continue
            x, dim, dtype = call
            if fn is softmax and dtype is None and _fuse(gm, node, name, x, dim, report):
                continue
            _replace(gm, node, fn, (x, dim, dtype))
            report.replaced.append(Change(node.name, name, "%s(dim=%d, dtype=%s)" % (
                fn.__name__, dim, dtype)))
            continue
        if key in _SDPA:
            args = _bind(node, _SDPA_PARAMS)
            if not decompose_sdpa:
                reason = "fused attention, no softmax node (decompose_sdpa=True rewrites it)"
            elif args.get("dropout_p", 0.0) != 0.0:
                reason = "dropout_p=%r: the rewrite has no dropout" % (args["dropout_p"],)
            else:
                reason = _unsupported_input(args["q"])
            if reason:
                report.left.append(Change(node.name, "scaled_dot_product_attention", reason))
                continue
            _replace(gm, node, attention, tuple(args.get(p) for p in _SDPA_PARAMS))
            report.replaced.append(Change(node.name, "scaled_dot_product_attention",
                                          "matmul, safe_softmax (warp_softmax), matmul"))
            continue
        found = _decomposed(node)
        if isinstance(found, str):
            report.left.append(Change(node.name, "exp / sum", found))
        elif found is not None:
            z, dim = found
            den, num = node.args[1], node.args[0]
            shifted = num.args[0] if num.args else num.kwargs["input"]
            pieces = [den, den.args[0], num] + ([shifted, shifted.args[1]] if _role(shifted, "sub") else [])
            if not _fuse(gm, node, "exp / sum", z, dim, report, pieces):
                _replace(gm, node, softmax, (z, dim, None))
                _erase_dead(gm, pieces)
                report.replaced.append(Change(node.name, "exp / sum", "softmax(dim=%d, dtype=None)" % dim))
    if report.replaced:
        gm.delete_all_unused_submodules()
        gm.graph.lint()
        gm.recompile()
    return report
