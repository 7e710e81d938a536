"""Layers: Module (parameters by attribute, named as torch names them), Linear, MLP, and
functional_call (a module run with other tensors in its parameters' places, torch.func's)."""

import numpy as np

from minigrad import functional as F
from minigrad.tensor import Tensor


class Module:
    """Collects the Tensors that require grad, and sub-Modules, from its attributes (and from
    lists and tuples of them), named by attribute and position: "layers.0.weight"."""

    def named_parameters(self):
        """(name, tensor) pairs, each tensor once (under its first name), as torch's."""
        seen = set()
        for name, owner, key in self._slots():
            value = _get(owner, key)
            if value.requires_grad and id(value) not in seen:
                seen.add(id(value))
                yield name, value

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def _slots(self, prefix=""):
        """(name, owner, key) for every place that holds a tensor (a parameter, or a frozen
        one or a buffer: functional_call replaces those too, as torch's): the owner is a
        module (key: an attribute) or a list or tuple (key: an index); a tensor held in two
        places (tied) has two."""
        for attr, value in vars(self).items():
            items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
            for index, item in items:
                name = prefix + attr + ("" if index is None else ".%d" % index)
                if isinstance(item, Module):
                    yield from item._slots(name + ".")
                elif isinstance(item, Tensor):
                    yield (name, self, attr) if index is None else (name, value, index)

    def zero_grad(self):
        for p in self.parameters():
            p._grad = None

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args):
        raise NotImplementedError


def functional_call(module, parameters, args=(), kwargs=None, *, tie_weights=True, strict=False):
    """module(*args, **kwargs) with the tensors in `parameters` (a dict by
    named_parameters' names, or a tuple of such dicts) in the places of the module's own, which
    are restored afterwards: torch.func.functional_call, so that grad and vmap can
    differentiate and batch a module's parameters (vmap(grad(loss)) over functional_call
    gives per-example gradients). As torch's: any tensor the module holds may be replaced
    (frozen ones, buffers); a non-tuple `args` is one argument; a tensor tied in two places is
    replaced in both by either name (tie_weights); a name where the module holds no tensor is
    set for the call (Linear(bias=False) given a bias uses it; an AttributeError where the
    path is not the module's) and a missing one keeps the module's own, unless strict, which
    makes either an error."""
    dicts = parameters if isinstance(parameters, tuple) else (parameters,)
    given = {}
    for d in dicts:
        for name, value in d.items():
            if name in given:
                raise ValueError("functional_call: %r is given twice" % name)
            if value is not None and not isinstance(value, Tensor):  # (None: removed, as torch)
                raise TypeError("functional_call: %r: %r is not a Tensor" % (name, value))
            given[name] = value
    slots = list(module._slots())
    current = {name: _get(owner, key) for name, owner, key in slots}
    by_tensor = {}  # id(a tied tensor) -> its new value, for every place that holds it
    for name, value in given.items():
        if tie_weights and name in current:
            if by_tensor.setdefault(id(current[name]), value) is not value:
                raise ValueError("functional_call: tied parameters are given different values "
                                 "(%r among them); pass tie_weights=False to untie them" % name)
    if strict:  # every place filled, by its name or (tie_weights) a tied one's
        missing = sorted(n for n, t in current.items()
                         if n not in given and id(t) not in by_tensor)
        unexpected = sorted(set(given) - set(current))
        if missing or unexpected:
            raise RuntimeError("functional_call(strict=True): missing %s, unexpected %s for %s"
                               % (missing, unexpected, type(module).__name__))
    swaps = []
    for name, owner, key in slots:
        old = current[name]
        new = given[name] if name in given else by_tensor.get(id(old), old)
        if new is not old:
            swaps.append((owner, key, old, new))
    for name in given.keys() - current.keys():
        owner, key = _owner(module, name)
        old = getattr(owner, key, _ABSENT)
        if old is not _ABSENT and old is not None:  # (a number, a submodule: not a tensor's place)
            raise TypeError("functional_call: attribute %r: %r is not a Tensor" % (name, old))
        swaps.append((owner, key, old, given[name]))
    applied = []  # (restored in reverse, so far as made: a swap may raise, as into a tuple)
    try:
        for owner, key, old, new in swaps:
            _put(owner, key, new)
            applied.append((owner, key, old))
        return module(*(args if isinstance(args, tuple) else (args,)), **(kwargs or {}))
    finally:
        for owner, key, old in reversed(applied):
            _put(owner, key, old)


_ABSENT = object()  # an attribute functional_call set that the module did not have


def _owner(module, name):
    """The module that a name's last part is an attribute of, and that part: as torch's
    functional_call, an AttributeError where the path is not the module's, a TypeError where
    it runs through something other than modules and lists."""
    obj, *path = [module] + name.split(".")
    for part in path[:-1]:
        try:
            obj = _get(obj, int(part) if isinstance(obj, (list, tuple)) else part)
        except (AttributeError, ValueError, IndexError):
            raise AttributeError("functional_call: %r: %s has no %r"
                                 % (name, type(obj).__name__, part)) from None
    if not isinstance(obj, Module):
        raise TypeError("functional_call: %r: %s holds no parameters"
                        % (name, type(obj).__name__))
    return obj, path[-1]


def _get(owner, key):
    return owner[key] if isinstance(owner, (list, tuple)) else getattr(owner, key)


def _put(owner, key, value):
    if value is _ABSENT:
        delattr(owner, key)
        return
    if isinstance(owner, tuple):
        raise TypeError("functional_call: a parameter held in a tuple cannot be replaced; hold "
                        "it in a list or an attribute")
    if isinstance(owner, list):
        owner[key] = value
    else:
        setattr(owner, key, value)


class Linear(Module):
    """y = x @ weight.T + bias, with torch's layout (weight is (out, in)) and init."""

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32, rng=None):
        if in_features < 0 or out_features < 0:
            raise ValueError("Linear: in_features and out_features must not be negative, got %d "
                             "and %d" % (in_features, out_features))
        rng = np.random.default_rng() if rng is None else rng
        bound = 1.0 / np.sqrt(in_features) if in_features else 0.0  # (as torch's, for no inputs)
        self.weight = Tensor(rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype),
                             requires_grad=True)
        self.bias = (Tensor(rng.uniform(-bound, bound, out_features).astype(dtype), requires_grad=True)
                     if bias else None)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class MLP(Module):
    """Linear layers of the given sizes with ReLU between them: MLP([64, 128, 10])."""

    def __init__(self, sizes, dtype=np.float32, rng=None):
        if len(sizes) < 2:
            raise ValueError("MLP needs at least an input and an output size, got %r" % (sizes,))
        rng = np.random.default_rng() if rng is None else rng
        self.layers = [Linear(a, b, dtype=dtype, rng=rng) for a, b in zip(sizes, sizes[1:])]

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)
