"""Count the places where a step waits for the host, on any device (CPU included): what a GPU step must not do.

On a GPU every read of a device value by the host (``.item()``, ``.tolist()``, ``int()``/``float()``/``bool()`` of a
tensor) and every op whose output *shape* depends on the data (``nonzero``, a boolean-mask read, ``masked_select``,
``unique``, ``bincount``, torchvision's NMS, ``repeat_interleave`` without ``output_size``) stalls the device until
the value reaches the host, and cuts a CUDA graph. The same ops run on the CPU, so they can be counted there:

    with HostSyncCounter() as counter:
        step()
    counter.total                  # host syncs
    counter.report()               # one line per site (op, package file:line), with its count

:class:`HostSyncCounter` is a ``TorchDispatchMode`` (it sees every aten op as it is dispatched) plus wrappers of the
Tensor methods that read memory without dispatching an op on the CPU (``tolist``, ``numpy``). It also looks *inside*
the package's custom ops (``maskrcnn::...``): their Python bodies run under the counter, so a sync hidden in an op
that ``torch.compile`` treats as opaque is counted too, and so is any op torch tags as reading data back
(``data_dependent_output``, e.g. ``allclose``). Masked writes of one host value (``x[mask] = 0.0``) are listed
apart and not counted: ATen runs them as ``masked_fill``, inductor lowers them to a select (``torch.where``), and
run eagerly on an H100 the static step's (the matchers' labels) made no synchronizing CUDA call
(bench/host_syncs.py --device cuda, docs/benchmarks.md); a masked write of a tensor of values, or through more than
one index, finds the mask's elements first and counts as a data-dependent shape.
"""
import collections
import os
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncCounter", "Site"]

_aten = torch.ops.aten
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_THIS = os.path.abspath(__file__)

HOST_READ = "host read"
DATA_SHAPE = "data-dependent shape"
MASKED_WRITE = "masked write (inductor: a select, no sync)"


def _overloads(*packets):
    out = set()
    for p in packets:
        for name in p.overloads():
            out.add(getattr(p, name))
    return out


_HOST_READS = _overloads(_aten._local_scalar_dense, _aten.item, _aten.equal, _aten.is_nonzero)
_DATA_SHAPES = _overloads(_aten.nonzero, _aten.argwhere, _aten.masked_select, _aten.unique_consecutive,
                          _aten._unique, _aten._unique2, _aten.unique_dim, _aten.bincount,
                          _aten.unique_dim_consecutive)
_REPEAT_INTERLEAVE = _overloads(_aten.repeat_interleave)
_INDEX_READS = _overloads(_aten.index)
_INDEX_WRITES = _overloads(_aten.index_put, _aten.index_put_, _aten._index_put_impl_)
# an untagged op whose CUDA kernel reads a value: masked_fill's tensor value (.item() in the kernel)
_MASKED_FILL_TENSOR = {_aten.masked_fill.Tensor, _aten.masked_fill_.Tensor}


def _torchvision_nms():
    try:
        import torchvision  # noqa: F401 - registers the op
        return _overloads(torch.ops.torchvision.nms)
    except (ImportError, AttributeError, RuntimeError):
        return set()


class Site(collections.namedtuple("Site", "kind op where")):
    """One place: ``kind`` (host read, data-dependent shape, masked write), ``op`` and ``where``: the innermost
    ``file:line (function)`` of the package on the stack (else of the caller)."""


def _where():
    frames = traceback.extract_stack()
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(_PACKAGE + os.sep)
            and os.path.abspath(f.filename) != _THIS]
    f = ours[-1] if ours else next((f for f in reversed(frames) if os.path.abspath(f.filename) != _THIS
                                    and "torch" + os.sep not in f.filename), frames[0])
    name = os.path.relpath(f.filename, os.path.dirname(_PACKAGE)) if ours else f.filename
    return f"{name}:{f.lineno} ({f.name})"


def _has_bool_index(indices):
    return any(t is not None and isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
               for t in indices)


def _is_masked_fill(args, kwargs, value_is_a_number):
    """``x[mask] = v`` that needs no nonzero: one index, a boolean mask on ``x``'s device, no accumulation, and one
    value held by the host. ATen then runs it as ``masked_fill`` (its ``canDispatchToMaskedFill``) and inductor
    lowers it to a select; any other boolean-indexed write finds the mask's elements first (a nonzero). On the CPU
    every tensor is on the host, so the value counts as held by the host only when ``x[mask] = v`` was given a
    Python number (``value_is_a_number``, seen at ``Tensor.__setitem__``): a one-element tensor there, or any value
    given to ``index_put_`` itself, would be on the GPU in a GPU run."""
    indices = [t for t in args[1] if t is not None]
    value = args[2] if len(args) > 2 else None
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    return (len(indices) == 1 and indices[0].dtype in (torch.bool, torch.uint8) and not accumulate
            and indices[0].device == args[0].device and isinstance(value, torch.Tensor) and value.numel() == 1
            and value.device.type == "cpu" and value_is_a_number)


def _custom_op_body(func):
    """The Python implementation of one of the package's custom ops (``maskrcnn::name``), or None."""
    if func.namespace != "maskrcnn":
        return None
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(func._schema.name)
    return getattr(opdef, "_init_fn", None)


class HostSyncCounter(TorchDispatchMode):
    """Counts host syncs while active (see the module's docstring). ``sites`` maps :class:`Site` -> count."""

    def __init__(self):
        super().__init__()
        self.sites = collections.Counter()
        self._nms = _torchvision_nms()
        self._saved = {}
        self._depth = 0
        self._setitem_numbers = []  # per Tensor.__setitem__ in progress: was its value a Python number

    # -- the Tensor methods that read memory without an op ----------------------------------------------------
    def __enter__(self):
        self._depth += 1
        if self._depth > 1:  # re-entered to look inside a custom op
            return super().__enter__()
        counter = self
        for name in ("tolist", "numpy"):
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def wrapped(t, *args, _original=original, _name=name, **kwargs):
                counter.sites[Site(HOST_READ, f"Tensor.{_name}", _where())] += 1
                with torch.utils._python_dispatch._disable_current_modes():
                    return _original(t, *args, **kwargs)
            setattr(torch.Tensor, name, wrapped)
        setitem = torch.Tensor.__setitem__
        self._saved["__setitem__"] = setitem

        def wrapped_setitem(t, index, value, _original=setitem):
            counter._setitem_numbers.append(isinstance(value, (int, float, bool)))
            try:
                return _original(t, index, value)
            finally:
                counter._setitem_numbers.pop()
        torch.Tensor.__setitem__ = wrapped_setitem
        return super().__enter__()

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for name, original in self._saved.items():
                setattr(torch.Tensor, name, original)
            self._saved = {}
        return super().__exit__(*exc)

    # -- every dispatched op ----------------------------------------------------------------------------------
    def _kind(self, func, args, kwargs):
        if func in _HOST_READS:
            return HOST_READ
        if func in _DATA_SHAPES or func in self._nms:
            return DATA_SHAPE
        if func in _REPEAT_INTERLEAVE and kwargs.get("output_size") is None and \
                (len(args) < 3 or args[2] is None) and func is not _aten.repeat_interleave.self_int:
            return DATA_SHAPE
        if func in _INDEX_READS and len(args) > 1 and _has_bool_index(args[1]):
            return DATA_SHAPE
        if func in _INDEX_WRITES and len(args) > 1 and _has_bool_index(args[1]):
            number = bool(self._setitem_numbers) and self._setitem_numbers[-1]
            return MASKED_WRITE if _is_masked_fill(args, kwargs, number) else DATA_SHAPE
        if func in _MASKED_FILL_TENSOR and (args[0].device.type == "cpu" or args[2].device.type != "cpu"):
            # a Python number dispatches masked_fill.Scalar; in a GPU run a host tensor's value is read from host
            # memory (no sync); in a CPU run every tensor is on the host: counted as it would be on the GPU
            return HOST_READ
        if torch.Tag.data_dependent_output in func.tags:  # one op whose kernel reads a value (torch.allclose)
            return HOST_READ
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self._kind(func, args, kwargs)
        if kind is not None:
            self.sites[Site(kind, str(func.overloadpacket.__name__), _where())] += 1
        body = _custom_op_body(func)
        if body is not None:  # look inside: run the op's Python body under this counter
            with self:
                return body(*args, **kwargs)
        return func(*args, **kwargs)

    # -- results ----------------------------------------------------------------------------------------------
    @property
    def total(self):
        """Host syncs: host reads and data-dependent shapes (masked writes are not)."""
        return sum(n for s, n in self.sites.items() if s.kind != MASKED_WRITE)

    def by_kind(self):
        out = collections.Counter()
        for s, n in self.sites.items():
            out[s.kind] += n
        return out

    def report(self):
        """Lines ``count  kind  op  where``, most frequent first."""
        rows = sorted(self.sites.items(), key=lambda kv: (kv[0].kind == MASKED_WRITE, -kv[1], kv[0].where))
        kind = max((len(s.kind) for s in self.sites), default=0)
        return [f"{n:5d}  {s.kind:{kind}}  {s.op:24.24}  {s.where}" for s, n in rows]
