"""Delta debugging of a failing program: drop statements, returned values, module-level definitions, inputs,
input layouts and steps while the same failure (class and key detail) still reproduces."""
import re
import time


def failure_key(f):
    """What must stay the same while minimizing: the class and what kind of difference it is."""
    if f is None:
        return None
    detail = f["detail"]
    if f["cls"] in ("missing exception", "spurious exception", "wrong exception"):
        detail = detail.split(":")[0]  # the exception type(s), not the message
    elif f["cls"] == "internal-error warning":
        # Which frame's guards (fn, a resume function, a lambda of the standard library's), not where it is.
        detail = re.sub(r"\d+", "N", re.sub(r"\(.*?\)", "", detail))[:120]
    elif f["cls"] in ("hang", "memory"):
        detail = ""
    return f["cls"], f.get("variant"), detail


def reduce_list(items, still_fails, deadline):
    """The smallest sublist (in the ddmin sense, 1-minimal where time allows) for which still_fails holds."""
    n = 2
    while items and time.monotonic() < deadline:
        chunk = max(1, -(-len(items) // n))
        for start in range(0, len(items), chunk):
            candidate = items[:start] + items[start + chunk:]
            if time.monotonic() > deadline:
                return items
            if still_fails(candidate):
                items = candidate
                n = max(n - 1, 2)
                break
        else:
            if chunk == 1:
                return items
            n = min(len(items), n * 2)
    return items


def minimize(program, failure, run, budget_s=120.0):
    """`run(program)` returns a failure dict or None. Returns (smaller program, its failure, runs made)."""
    key = failure_key(failure)
    deadline = time.monotonic() + budget_s
    best = {"program": program, "failure": failure}
    runs = [0]
    broken = ("NameError", "UnboundLocalError", "SyntaxError")

    def check(candidate):
        runs[0] += 1
        f = run(candidate)
        # A cut that leaves a name undefined makes eager raise: a different program, not a smaller one.
        if f is not None and failure_key(f) == key and (f.get("eager_raised") not in broken or
                                                         failure.get("eager_raised") in broken):
            best.update(program=candidate, failure=f)
            return True
        return False

    # Only the failing variant, up to the failing step.
    steps = {n: s for n, _, s in program.variants()}
    variant = failure.get("variant")
    if variant in steps:
        index = failure["step_index"] if failure.get("step_index", -1) >= 0 else _step_index(steps[variant], failure)
        if not check(program.copy(steps_override={variant: steps[variant][:index + 1]})):
            return best["program"], best["failure"], runs[0]

    def cut(field):
        reduce_list(getattr(best["program"], field), lambda items: check(best["program"].copy(**{field: items})),
                    deadline)

    for _ in range(2):  # a second round where the first made progress: a cut can enable another
        size = _size(best["program"])
        cut("returns")  # first: a returned name keeps its statement alive
        cut("body")
        _simplify_statements(best, check, deadline)
        cut("returns")
        if len(best["program"].returns) > 1:
            check(best["program"].copy(ret_form="tuple"))
        cut("prelude")
        cut("inputs")
        for i, spec in enumerate(best["program"].inputs):
            if spec.layout != ("contiguous",) and time.monotonic() < deadline:
                inputs = list(best["program"].inputs)
                inputs[i] = spec.__class__(spec.name, spec.kind, spec.dims, spec.dtype, ("contiguous",))
                check(best["program"].copy(inputs=inputs))
        if variant in steps:  # the calls before the failing one
            last = best["program"].steps_override[variant][-1:]
            reduce_list(best["program"].steps_override[variant][:-1],
                        lambda s: check(best["program"].copy(steps_override={variant: s + last})), deadline)
        if _size(best["program"]) == size or time.monotonic() > deadline:
            break
    return best["program"], best["failure"], runs[0]


def _simplify_statements(best, check, deadline):
    """Each compound statement in turn: one branch or body instead of the whole, or one line fewer."""
    i = 0
    while i < len(best["program"].body) and time.monotonic() < deadline:
        stmt = best["program"].body[i]
        for text in simplifications(stmt.text):
            if time.monotonic() > deadline:
                return
            body = list(best["program"].body)
            body[i] = stmt.__class__(stmt.kind, text)
            if check(best["program"].copy(body=body)):
                break
        else:
            i += 1


CONTINUATIONS = ("else", "elif", "except", "finally")


def simplifications(text):
    """Smaller versions of a multi-line statement: an if/else, loop, try or with replaced by one of its bodies,
    and each top-level line dropped."""
    lines = text.rstrip().split("\n")
    if len(lines) < 2:
        return []
    blocks = {}  # first line of each block header -> the line after its indented body
    for k, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            end = k + 1
            while end < len(lines) and lines[end].startswith(" "):
                end += 1
            blocks[k] = end
    out = []
    for first, end in blocks.items():
        if _word(lines[first]) in ("def", "class"):
            continue
        owner = first
        while _word(lines[owner]) in CONTINUATIONS:
            owner = max(b for b in blocks if b < owner)
        stop = blocks[owner]
        while stop < len(lines) and _word(lines[stop]) in CONTINUATIONS:
            stop = blocks[stop]
        out.append("\n".join(lines[:owner] + [l[4:] for l in lines[first + 1:end]] + lines[stop:]))
    for k, line in enumerate(lines):
        if not line.startswith(" ") and not line.endswith(":"):
            out.append("\n".join(lines[:k] + lines[k + 1:]))
    return [t for t in out if t.strip() and t != text]


def _word(line):
    return line.split(" ")[0].rstrip(":")


def _step_index(steps, failure):
    for i, s in enumerate(steps):
        if s["name"] == failure.get("step"):
            return i
    return len(steps) - 1


def _size(p):
    return (len(p.body), len(p.returns), len(p.prelude), len(p.inputs),
            sum(len(s) for s in (p.steps_override or {}).values()))
