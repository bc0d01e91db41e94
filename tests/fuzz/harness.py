"""Runs one generated program eagerly and compiled, step by step, and compares everything observable.

Self-contained on purpose (torch, fastcomp and the standard library only): every repro file carries a verbatim
copy of this module, so `python repro_xxx.py` needs nothing from the repository.

A program is Python source that defines `fn(*args)` and `make_inputs(sizes, seed, dtypes, grad)`; a step is
{"name", "sizes", "seed", "dtypes", "grad"}. The source is executed twice, into an eager and a compiled namespace,
so module-level state (a StringIO, a list, an nn.Module's parameters) is never shared between the two runs.
"""
import io
import math
import re
import sys
import warnings

import torch
import torch.utils._pytree as pytree

import fastcomp

# Classes of failure, worst first: a summary lists them in this order.
CLASSES = ("crash", "hang", "memory", "wrong value", "wrong type", "missing exception", "spurious exception",
           "wrong exception", "internal-error warning")

# Per-dtype tolerances of compiled against eager: loose enough for a different but valid evaluation order,
# tight enough that a wrong op, a stale value or a wrong broadcast is far outside them.
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2), torch.float32: (1e-4, 1e-5),
              torch.float64: (1e-7, 1e-7)}


class Mismatch(Exception):
    def __init__(self, cls, detail, where, eager, compiled):
        super().__init__(f"{cls}: {detail} at {where}")
        self.cls, self.detail, self.where, self.eager, self.compiled = cls, detail, where, eager, compiled


def describe(v, limit=400):
    """A short, stable text of a value for reports."""
    if isinstance(v, torch.Tensor):
        with torch.no_grad():
            t = v.detach()
            body = "" if t.numel() > 64 else " " + re.sub(r"\s+", " ", repr(t.tolist()))
        kind = "" if type(v) is torch.Tensor else type(v).__name__ + " "
        grad = " requires_grad" if v.requires_grad else ""
        text = f"{kind}tensor({str(t.dtype)[6:]}{list(t.shape)}{grad}{body})"
    elif isinstance(v, BaseException):
        text = f"{type(v).__name__}: {v}"
    else:
        text = f"{type(v).__name__} {v!r}"
    return text if len(text) <= limit else text[:limit] + "..."


def _type_name(v):
    """Classes the program defines are two objects (one per namespace) with one name."""
    t = type(v)
    return (t.__module__.replace("fuzz_compiled", "fuzz_eager"), t.__qualname__)


def _is_namedtuple(v):
    return isinstance(v, tuple) and hasattr(type(v), "_fields")


def compare(e, c, where="out"):
    """Raises Mismatch at the first difference between an eager value `e` and a compiled value `c`."""
    if type(e) is not type(c) and _type_name(e) != _type_name(c):
        detail = "torch.Size vs tuple" if {type(e), type(c)} == {torch.Size, tuple} else "python type"
        raise Mismatch("wrong type", detail, where, describe(e), describe(c))
    if isinstance(e, torch.Tensor):
        return _compare_tensors(e, c, where)
    if isinstance(e, (list, tuple)):
        if len(e) != len(c):
            raise Mismatch("wrong value", "length", where, describe(e), describe(c))
        names = type(e)._fields if _is_namedtuple(e) else range(len(e))
        for n, a, b in zip(names, e, c):
            compare(a, b, f"{where}.{n}" if isinstance(n, str) else f"{where}[{n}]")
        return
    if isinstance(e, dict):  # keys in order, compared as values (a tensor key is another object in each run)
        try:
            compare(list(e), list(c), where + ".keys()")
        except Mismatch:
            raise Mismatch("wrong value", "dict keys", where, describe(list(e)), describe(list(c))) from None
        for k, a, b in zip(e, e.values(), c.values()):
            compare(a, b, f"{where}[{k!r}]" if not isinstance(k, torch.Tensor) else f"{where}[<tensor key>]")
        return
    if isinstance(e, float):
        if not (e == c or (math.isnan(e) and math.isnan(c)) or math.isclose(e, c, rel_tol=1e-5, abs_tol=1e-6)):
            raise Mismatch("wrong value", "python float", where, repr(e), repr(c))
        return
    if isinstance(e, (int, bool, str, bytes, type(None), torch.dtype, torch.device, slice, range)):
        if e != c:
            raise Mismatch("wrong value", f"python {type(e).__name__}", where, repr(e), repr(c))
        return
    if isinstance(e, io.StringIO):
        return compare(e.getvalue(), c.getvalue(), where + ".getvalue()")
    if isinstance(e, torch.nn.Module):
        compare(_attributes(e), _attributes(c), where + " attributes")
        return compare(dict(e.state_dict(keep_vars=True)), dict(c.state_dict(keep_vars=True)), where + ".state_dict()")
    # Functions, lambdas, other objects: two separately executed programs never share them; the type is the check.


def _attributes(m):
    return {k: v for k, v in vars(m).items() if type(v) in (int, float, bool, str)}


def _compare_tensors(e, c, where):
    for what, a, b in (("shape", e.shape, c.shape), ("dtype", e.dtype, c.dtype), ("device", e.device, c.device),
                       ("requires_grad", e.requires_grad, c.requires_grad)):
        if a != b:
            raise Mismatch("wrong value", what, where, describe(e), describe(c))
    a, b = e.detach().cpu(), c.detach().cpu()
    if a.is_floating_point() or a.is_complex():
        rtol, atol = TOLERANCES.get(a.dtype, (1e-5, 1e-6))
        if _INPUT_PRECISION[0] is not None:  # values computed from f32 inputs are no closer than f32 in an f64 result
            rtol, atol = (max(x, y) for x, y in zip((rtol, atol), TOLERANCES[_INPUT_PRECISION[0]]))
        try:
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        except AssertionError:
            raise Mismatch("wrong value", "tensor values", where, describe(e), describe(c)) from None
    elif not torch.equal(a, b):
        raise Mismatch("wrong value", "tensor values", where, describe(e), describe(c))


def module_state(ns):
    """What a program left in its module namespace that a run could change: StringIOs, lists, dicts, tensors,
    modules. Names are the program's own (no dunders, modules, functions or classes)."""
    skip = (type(io), type(describe), type, type(print))
    return {k: v for k, v in ns.items()
            if not k.startswith("_") and k not in ("DEVICE", "fn", "make_inputs") and not isinstance(v, skip)
            and isinstance(v, (io.StringIO, list, dict, torch.Tensor, torch.nn.Module, int, float))}


def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _tensors(x)


def _storages(ts):
    out = set()
    for t in ts:
        try:
            out.add(t.untyped_storage().data_ptr())
        except Exception:  # noqa: BLE001 - a tensor without storage (sparse, meta) aliases nothing
            pass
    return out


def _aliasing(out, args):
    """Which outputs share storage with which inputs (by position): views of inputs must stay views."""
    inputs = [_storages([a]) for a in args]
    return [[i for i, s in enumerate(inputs) if _storages([t]) & s] for t in _tensors(out)]


def _call(fn, args, seed):
    torch.manual_seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(*args), None, [str(w.message) for w in caught]
        except Exception as e:  # noqa: BLE001 - any exception is an observable result to compare
            return None, e, [str(w.message) for w in caught]


def _backward(out, leaves, modules):
    """Grads of the sum of every float output that needs grad, w.r.t. the inputs' leaves and modules' parameters."""
    ts = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
    if not ts:
        return None, None
    try:
        sum(t.double().sum() for t in ts).backward()
    except Exception as e:  # noqa: BLE001
        return None, e
    grads = [l.grad for l in leaves]
    for m in modules:
        grads += [p.grad for _, p in sorted(m.named_parameters())]
    return grads, None


def exception_text(e):
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


def run_variant(source, filename, dynamic, steps, progress=None, verbose=False):
    """Runs `steps` of one program eagerly and compiled with fastcomp.compile(fn, dynamic=dynamic).
    Returns {"failure": None or a dict, "stats": {...}}."""
    fastcomp.reset()
    fastcomp.config.background_compile = False  # the first call runs the compiled code, not torch meanwhile
    ns_e, ns_c = {"__name__": "fuzz_eager"}, {"__name__": "fuzz_compiled"}
    exec(compile(source, filename, "exec"), ns_e)
    exec(compile(source, filename, "exec"), ns_c)
    fn_e, fn_c = ns_e["fn"], fastcomp.compile(ns_c["fn"], dynamic=dynamic)
    stats = {"steps": 0, "warnings": [], "eager_exceptions": 0, "frames": 0, "graphs": 0, "breaks": 0}
    from fastcomp.testing import CompileCounter

    with CompileCounter() as counter:
        failure = _run_steps(ns_e, ns_c, fn_e, fn_c, steps, stats, progress, verbose)
    if failure and failure["cls"] == "wrong value" and failure["where"].startswith("out") and \
            not stats.get("device_assert"):
        ill_conditioned = _turns_on_rounding(source, filename, steps[:failure["step_index"] + 1])
        if _device_asserted():  # a second opinion's eager run asserted (a nudged value used as an index)
            stats["device_assert"] = "a second eager run ended in a device-side assert"
        elif ill_conditioned:
            stats["ill_conditioned"] = 1
            failure = None
    stats.update(frames=counter.frame_count, graphs=counter.graph_count, breaks=counter.break_count)
    return {"failure": failure, "stats": stats}


def _run_steps(ns_e, ns_c, fn_e, fn_c, steps, stats, progress, verbose):
    warned = None
    for index, step in enumerate(steps):
        if progress:
            progress(step["name"])
        dtypes = {k: getattr(torch, v) for k, v in step.get("dtypes", {}).items()}
        args_e, leaves_e = ns_e["make_inputs"](step["sizes"], step["seed"], dtypes, step.get("grad", False))
        args_c, leaves_c = ns_c["make_inputs"](step["sizes"], step["seed"], dtypes, step.get("grad", False))
        out_e, exc_e, _ = _call(fn_e, args_e, step["seed"])
        if _device_asserted():
            # Eager's own program asserted on the device (an index out of range), asynchronously: a host error after
            # it may have been what it raised. Nothing to compare; the key's text has the worker replaced.
            stats["device_assert"] = "eager's run ended in a device-side assert"
            return warned
        out_c, exc_c, warns = _call(fn_c, args_c, step["seed"])
        if _device_asserted():  # eager's call ran clean (checked above): the compiled one asserted
            stats["device_assert"] = "the compiled run ended in a device-side assert"
            return _failure(step, index, "crash", "device-side assert in the compiled call (eager's ran clean)",
                            "out", exception_text(exc_e) if exc_e is not None else "ran clean", "device-side assert")
        stats["steps"] += 1
        stats["eager_exceptions"] += exc_e is not None
        stats["warnings"] += [w for w in warns if w.startswith("fastcomp")]
        if verbose:
            print(f"step {index} {step['name']!r} sizes={step['sizes']} seed={step['seed']} dtypes={step.get('dtypes', {})}"
                  f" grad={step.get('grad', False)}")
            print(f"  eager:    {describe(exc_e if exc_e is not None else out_e, 2000)}")
            print(f"  compiled: {describe(exc_c if exc_c is not None else out_c, 2000)}")
            for w in warns:
                print(f"  warning:  {w}")
        failure = _check_step(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e,
                              exc_c, warns)
        if failure and failure["cls"] == "wrong value" and _eager_is_nondeterministic(ns_e, fn_e, step, dtypes, out_e) \
                and not _device_asserted():
            # Eager disagrees with itself (uninitialised memory, e.g. median of an expanded tensor): nothing to
            # compare, and the second run changed the eager namespace, so the later steps end here too.
            stats["nondeterministic_eager"] = stats.get("nondeterministic_eager", 0) + 1
            return warned
        if failure and failure["cls"] != "internal-error warning":
            return failure
        warned = warned or failure
    return warned  # a warning is reported when nothing worse came after it


def _device_asserted():
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return False
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - torch.AcceleratorError (RuntimeError before torch 2.8)
        return True
    return False


def _eager_is_nondeterministic(ns_e, fn_e, step, dtypes, out_e):
    """Whether a second eager run on the same inputs gives another result."""
    args, _ = ns_e["make_inputs"](step["sizes"], step["seed"], dtypes, step.get("grad", False))
    again, exc, _ = _call(fn_e, args, step["seed"])
    if exc is not None:
        return True
    try:
        compare(out_e, again, "out")
    except Mismatch:
        return True
    return False


_RANDOM = re.compile(r"\btorch\.(rand|randn|randint|randperm|normal|bernoulli|multinomial)(_like)?\b|dropout|"
                     r"\.(uniform_|normal_|bernoulli_|exponential_|random_|geometric_|cauchy_|log_normal_)\(")


def _turns_on_rounding(source, filename, steps):
    """Whether the program's eager result over `steps` turns on rounding, so that it has no single right answer to
    hold the compiled result to: eager disagrees with itself (beyond the tolerance) where its float inputs move by
    one ulp (a floor or a comparison of a sum that lands on an integer: 21.0 or 20.99998), or, for a CUDA program
    without random ops, eager on the CPU disagrees with eager on CUDA (other reduction orders: x - x.mean() of
    equal values compared with 0). A compiled kernel may contract a product and a sum (an FMA) or sum in another
    order, as torch.compile's do."""
    out, exc, args = _eager_run(source, filename, steps)
    if exc is not None:
        return False
    second_opinions = [_eager_run(source, filename, steps, nudge=True)]
    program = source.split("\ndef make_inputs(")[0]  # make_inputs draws its values on the CPU for every device
    if "DEVICE = 'cuda'" in source and not _RANDOM.search(program):  # the CPU draws other random numbers
        second_opinions.append(_eager_run(source, filename, steps, device="cpu"))
    on_cpu = lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v  # noqa: E731
    _INPUT_PRECISION[0] = _least_precise(args)
    try:
        for other, other_exc, _ in second_opinions:
            if other_exc is not None:  # an op the CPU lacks for a dtype: no opinion
                continue
            try:
                compare(pytree.tree_map(on_cpu, out), pytree.tree_map(on_cpu, other), "out")
            except Mismatch:
                return True
    finally:
        _INPUT_PRECISION[0] = None
    return False


def _eager_run(source, filename, steps, device=None, nudge=False):
    """(output, exception, inputs) of the program's eager run over `steps` in a namespace of its own; on `device`
    instead of the program's, or with the last step's float inputs moved up by one ulp where they can be."""
    ns = {"__name__": "fuzz_eager"}
    exec(compile(source, filename, "exec"), ns)
    if device:
        ns["DEVICE"] = device  # make_inputs and fn read it when called
    out = exc = args = None
    for i, step in enumerate(steps):
        dtypes = {k: getattr(torch, v) for k, v in step.get("dtypes", {}).items()}
        args, _ = ns["make_inputs"](step["sizes"], step["seed"], dtypes, step.get("grad", False))
        if nudge and i == len(steps) - 1:
            for a in args:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    with torch.no_grad():
                        try:
                            a.copy_(torch.nextafter(a, torch.full_like(a, math.inf)))
                        except RuntimeError:  # an expanded input (one element seen many times) stays as it is
                            pass
        out, exc, _ = _call(ns["fn"], args, step["seed"])
    return out, exc, args


def _failure(step, index, cls, detail, where, eager, compiled):
    return {"cls": cls, "step": step["name"], "step_index": index, "detail": detail, "where": where,
            "eager": eager, "compiled": compiled}


def _check_step(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e, exc_c, warns):
    failure = _compare_step(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e, exc_c)
    bad = [w for w in warns if "internal error" in w]
    if failure is None and bad:
        failure = _failure(step, index, "internal-error warning", bad[0], "warning", "", bad[0])
    if failure is not None:
        failure["eager_raised"] = type(exc_e).__name__ if exc_e is not None else None
    return failure


# The least precise floating dtype among a step's inputs, while its results are compared: a kernel may contract
# f32 products and sums (an FMA) that torch rounds one by one, and a cast of the result to f64 keeps that.
_INPUT_PRECISION = [None]


def _least_precise(args):
    floats = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype in TOLERANCES]
    return max(floats, key=lambda d: TOLERANCES[d][0], default=None)


def _compare_step(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e, exc_c):
    _INPUT_PRECISION[0] = _least_precise(args_e)
    try:
        return _compare_step_values(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e,
                                    exc_c)
    finally:
        _INPUT_PRECISION[0] = None


def _compare_step_values(step, index, ns_e, ns_c, args_e, args_c, leaves_e, leaves_c, out_e, out_c, exc_e, exc_c):
    if exc_e is not None and exc_c is None:
        return _failure(step, index, "missing exception", exception_text(exc_e), "out", exception_text(exc_e),
                        describe(out_c))
    if exc_c is not None and exc_e is None:
        return _failure(step, index, "spurious exception", exception_text(exc_c), "out", describe(out_e),
                        exception_text(exc_c))
    if exc_e is not None and type(exc_e) is not type(exc_c):
        return _failure(step, index, "wrong exception", f"{type(exc_e).__name__} vs {type(exc_c).__name__}", "out",
                        exception_text(exc_e), exception_text(exc_c))
    try:
        if exc_e is None:
            compare(out_e, out_c, "out")
            if _aliasing(out_e, args_e) != _aliasing(out_c, args_c):
                raise Mismatch("wrong value", "aliasing of outputs with inputs", "out",
                               repr(_aliasing(out_e, args_e)), repr(_aliasing(out_c, args_c)))
        compare(list(args_e), list(args_c), "inputs after the call")
        compare(module_state(ns_e), module_state(ns_c), "module state")
        if step.get("grad") and exc_e is None:
            mods_e = [v for v in module_state(ns_e).values() if isinstance(v, torch.nn.Module)]
            mods_c = [v for v in module_state(ns_c).values() if isinstance(v, torch.nn.Module)]
            grads_e, bexc_e = _backward(out_e, leaves_e, mods_e)
            grads_c, bexc_c = _backward(out_c, leaves_c, mods_c)
            if (bexc_e is None) != (bexc_c is None) or (bexc_e is not None and type(bexc_e) is not type(bexc_c)):
                cls = "missing exception" if bexc_c is None else "spurious exception" if bexc_e is None else "wrong exception"
                return _failure(step, index, cls, "backward: " + exception_text(bexc_e or bexc_c), "backward",
                                describe(bexc_e), describe(bexc_c))
            compare(grads_e, grads_c, "grads")
            for m_e, m_c in zip(mods_e, mods_c):
                m_e.zero_grad(), m_c.zero_grad()
    except Mismatch as m:
        detail = m.detail if m.where.startswith("out") else f"{m.where.split('[')[0]}: {m.detail}"
        return _failure(step, index, m.cls, detail, m.where, m.eager, m.compiled)
    return None


def main(source, variants):
    """A repro's entry point: prints every step eager vs compiled, then the verdict; exit status 1 on a failure."""
    torch.set_printoptions(precision=6, threshold=64)
    for v in variants:
        print(f"fastcomp.compile(fn, dynamic={v['dynamic']})")
        failure = run_variant(source, "fuzz_program.py", v["dynamic"], v["steps"], verbose=True)["failure"]
        if failure:
            print(f"\nFAIL ({failure['cls']}) at step {failure['step']!r}: {failure['detail']} ({failure['where']})")
            print(f"  eager:    {failure['eager']}\n  compiled: {failure['compiled']}")
            sys.stdout.flush()
            return 1
    print("\nOK: compiled matches eager on every step")
    return 0
