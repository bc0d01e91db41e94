"""Library models captured whole: every zoo model compiles to one graph with no break, gives eager's results (every
tensor of its output structure, the same output types), compiles nothing for new input values, and compiles once
more for a new sequence length or batch (then it is dynamic)."""
import time

import pytest
import torch

import fastcomp
from fastcomp.testing import CompileCounter

from . import zoo


def _models():
    out = []
    for maker, module in ((zoo.transformers_models, "transformers"), (zoo.more_transformers_models, "transformers"),
                          (zoo.timm_models, "timm"), (zoo.torchvision_models, "torchvision")):
        try:
            __import__(module)
        except Exception as e:  # the library is missing or cannot import here
            out.append(pytest.param(None, id=module, marks=pytest.mark.skip(reason=f"{module}: {e}")))
            continue
        out += [pytest.param(m, id=m.name) for m in maker()]
    return out


def _flatten(out, path="out"):
    """(path, tensor or leaf) pairs of a model output, through tuples, dicts, ModelOutputs and cache objects."""
    if isinstance(out, torch.Tensor):
        return [(path, out)]
    if isinstance(out, dict):  # ModelOutput is an OrderedDict
        return [p for k, v in out.items() for p in _flatten(v, f"{path}[{k!r}]")]
    if isinstance(out, (list, tuple)):
        return [p for i, v in enumerate(out) for p in _flatten(v, f"{path}[{i}]")]
    if hasattr(out, "__dict__") and not isinstance(out, torch.nn.Module):  # a Cache and its layers
        return [(path, type(out))] + [p for k, v in vars(out).items() for p in _flatten(v, f"{path}.{k}")]
    return [(path, out)]


def assert_same_output(actual, expected, tolerance=1e-5, scaled=False):
    """Same structure, output types, devices, shapes and dtypes; values within `tolerance` (relative, and absolute
    times each output's largest magnitude when `scaled`: the GPU backend's fused kernels and cuBLASLt sum in other
    orders than torch's kernels)."""
    assert type(actual) is type(expected)
    a, e = _flatten(actual), _flatten(expected)
    assert [p for p, _ in a] == [p for p, _ in e]
    for (path, x), (_, y) in zip(a, e):
        if isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor) and x.device == y.device, path
            assert x.shape == y.shape and x.dtype == y.dtype, path
            scale = max(1.0, y.abs().max().item()) if scaled and y.is_floating_point() and y.numel() else 1.0
            torch.testing.assert_close(x, y, rtol=tolerance, atol=tolerance * scale, msg=lambda m: f"{path}: {m}")
        else:
            assert x == y, path


def call(model, inputs):
    return model(*inputs) if isinstance(inputs, tuple) else model(**inputs)


@pytest.mark.parametrize("spec", _models())
def test_model_captures_whole_and_matches_eager(spec):
    torch.manual_seed(0)
    model = spec.build().eval()
    compiled = fastcomp.compile(model)
    first, new_size, another = spec.sizes
    with torch.no_grad():
        inputs = spec.inputs(first)
        with CompileCounter() as cc:
            start = time.perf_counter()
            out = call(compiled, inputs)
            first_call_ms = (time.perf_counter() - start) * 1e3
        assert_same_output(out, call(model, inputs))
        assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
        trace_ms = sum(r["compile_time_s"] for r in cc.records) * 1e3
        print(f"\n{spec.name}: first call {first_call_ms:.0f} ms, traced and built in {trace_ms:.0f} ms")

        with CompileCounter() as cc:  # new values, same sizes: nothing to compile
            for _ in range(2):
                inputs = spec.inputs(first)
                assert_same_output(call(compiled, inputs), call(model, inputs))
        assert cc.frame_count == 0, cc.records

        with CompileCounter() as cc:  # a new size: one recompile, after which the size is dynamic
            for size in (new_size, another):
                inputs = spec.inputs(size)
                assert_same_output(call(compiled, inputs), call(model, inputs))
        assert cc.frame_count <= 1 and cc.break_count == 0, cc.records


@pytest.mark.parametrize("explicit", ["all", "cuda"], ids=["explicit", "kept"])
@pytest.mark.parametrize("spec", _models())
def test_model_under_cpu_autocast_captures_whole_and_matches_eager(spec, explicit):
    """Called under `torch.autocast("cpu", dtype=torch.bfloat16)`: one graph traced under it (the library's own
    blocks that switch autocast off for rotary embeddings or linear attention included), whose results are eager's
    under autocast exactly (the same ops on the same casts), dtypes included; new values compile nothing. With
    casts made explicit (as on CUDA by default) every op's casts are Tensor.to nodes and the graph runs with
    autocast suspended; kept (the CPU's default), its ops run under autocast."""
    torch.manual_seed(0)
    model = spec.build().eval()
    compiled = fastcomp.compile(model)
    with fastcomp.config.patch(explicit_autocast=explicit), torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with CompileCounter() as cc:
            for _ in range(2):
                inputs = spec.inputs(spec.sizes[0])
                assert_same_output(call(compiled, inputs), call(model, inputs), tolerance=0)
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records
    backend = cc.records[0]["backend"]
    assert ("autocast suspended" in backend) == (explicit == "all"), backend


@pytest.mark.parametrize("name", ["gpt2-lm-head", "llama-causal-lm-cache"])
def test_training_step_with_labels_captures_whole_and_matches_eager(name):
    """train() with labels: the loss path (the library's loss function, logger.warning_once behind a memoised
    method) is one graph; loss and every gradient equal eager's."""
    import copy

    pytest.importorskip("transformers")
    (spec,) = [m for m in zoo.transformers_models() if m.name == name]
    torch.manual_seed(0)
    model = spec.build().train()
    twin = copy.deepcopy(model)
    compiled = fastcomp.compile(twin)
    ids = zoo._ids(2, 16)
    for step in range(2):
        torch.manual_seed(step)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        with CompileCounter() as cc:
            torch.manual_seed(step)
            compiled_loss = compiled(input_ids=ids, labels=ids).loss
            compiled_loss.backward()
        torch.testing.assert_close(compiled_loss, loss, rtol=1e-6, atol=1e-6)
        assert cc.break_count == 0 and cc.graph_count == (1 if step == 0 else 0), cc.records
    grads = dict(model.named_parameters())
    for n, p in twin.named_parameters():
        torch.testing.assert_close(p.grad, grads[n].grad, rtol=1e-5, atol=1e-6, msg=n)



@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_training_with_gradient_checkpointing_matches_eager(reentrant):
    """gradient_checkpointing_enable(): each decoder layer runs under torch.utils.checkpoint, whose backward runs the
    layer again in CPython (tests/test_checkpoint.py); loss and gradients are eager's."""
    import copy

    pytest.importorskip("transformers")
    (spec,) = [m for m in zoo.transformers_models() if m.name == "llama"]
    torch.manual_seed(0)
    model = spec.build().train()
    model.gradient_checkpointing_enable({"use_reentrant": reentrant})
    twin = copy.deepcopy(model)
    compiled = fastcomp.compile(twin)
    ids = zoo._ids(2, 16)
    embeds = model.embed_tokens(ids).detach().requires_grad_()  # reentrant checkpoints need an input needing grad
    model(inputs_embeds=embeds).last_hidden_state.pow(2).mean().backward()
    twin_embeds = embeds.detach().clone().requires_grad_()
    compiled(inputs_embeds=twin_embeds).last_hidden_state.pow(2).mean().backward()
    torch.testing.assert_close(twin_embeds.grad, embeds.grad, rtol=0, atol=0)
    grads = dict(model.named_parameters())
    for name, p in twin.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-6, atol=1e-7, msg=name)


def _to(inputs, device):
    if isinstance(inputs, tuple):
        return tuple(t.to(device) for t in inputs)
    return {k: v.to(device) for k, v in inputs.items()}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("spec", _models())
def test_model_on_cuda_captures_whole_and_matches_eager(spec, mode):
    """The zoo on the GPU: one graph, no break; the first call (torch runner while kernels compile) and the calls
    after the backend's kernels are ready (and, in reduce-overhead, replayed as a CUDA graph) give eager's results."""
    torch.manual_seed(0)
    model = spec.build().eval().cuda()
    compiled = fastcomp.compile(model, mode=mode)
    first = spec.sizes[0]
    with torch.no_grad():
        inputs = _to(spec.inputs(first), "cuda")
        with CompileCounter() as cc:
            out = call(compiled, inputs)
        assert_same_output(out, call(model, inputs), tolerance=1e-4, scaled=True)
        assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
        assert fastcomp.wait_for_compiles(timeout=120)
        with CompileCounter() as cc:
            for _ in range(3):  # kernels ready; reduce-overhead records and then replays its CUDA graph
                inputs = _to(spec.inputs(first), "cuda")
                assert_same_output(call(compiled, inputs), call(model, inputs), tolerance=1e-4, scaled=True)
        assert cc.frame_count == 0, cc.records


def _cast(inputs, dtype):
    """Inputs with their floating-point tensors in `dtype` (ids and masks stay integer)."""
    cast = lambda t: t.to(dtype) if t.is_floating_point() else t  # noqa: E731
    if isinstance(inputs, tuple):
        return tuple(cast(t) for t in inputs)
    return {k: cast(v) for k, v in inputs.items()}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("spec", _models())
def test_model_in_bfloat16_on_cuda_is_as_close_to_float32_as_eager(spec, mode):
    """`model.to(torch.bfloat16)`: fused kernels round in other places than torch's kernels, so bf16 results are
    not eager's bit for bit. Each output is compared with a float32 run of the same weights instead (float64 has no
    grouped matmul): fastcomp's error must stay within twice eager's own error (plus one bf16 rounding of the
    output's scale)."""
    import copy

    torch.manual_seed(0)
    model = spec.build().eval().cuda()
    reference = copy.deepcopy(model)
    model = model.to(torch.bfloat16)
    compiled = fastcomp.compile(model, mode=mode)
    with torch.no_grad():
        inputs = _to(spec.inputs(spec.sizes[0]), "cuda")
        with CompileCounter() as cc:
            call(compiled, _cast(inputs, torch.bfloat16))
        assert (cc.graph_count, cc.break_count) == (1, 0), cc.records
        assert fastcomp.wait_for_compiles(timeout=120)
        for _ in range(3):  # kernels ready; reduce-overhead records and then replays its CUDA graph
            inputs = _to(spec.inputs(spec.sizes[0]), "cuda")
            got = _flatten(call(compiled, _cast(inputs, torch.bfloat16)))
            eager = _flatten(call(model, _cast(inputs, torch.bfloat16)))
            exact = _flatten(call(reference, inputs))
            assert [p for p, _ in got] == [p for p, _ in exact]
            for (path, x), (_, y), (_, z) in zip(got, eager, exact):
                if not isinstance(z, torch.Tensor) or not z.is_floating_point():
                    assert type(x) is type(y), path
                    continue
                assert x.dtype == y.dtype == torch.bfloat16 and x.shape == z.shape, path
                ours, theirs = (x.double() - z).abs().max().item(), (y.double() - z).abs().max().item()
                scale = max(1.0, z.abs().max().item())
                assert ours <= 2 * theirs + torch.finfo(torch.bfloat16).eps * scale, (path, ours, theirs)


def _padded_text(seq):
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[0, -seq // 3:] = 0  # the first sequence is padded
    return {"input_ids": zoo._ids(2, seq), "attention_mask": mask}


def _usage_variants():
    """How users call these models beyond input_ids: padding masks, classification labels (the loss module is built
    inside forward), hidden states and attentions (forward hooks the library installs), tuples instead of
    ModelOutputs."""
    try:
        import transformers as T
    except Exception as e:  # noqa: BLE001
        return [pytest.param(None, None, id="transformers", marks=pytest.mark.skip(reason=str(e)))]
    bert = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=zoo.VOCAB)
    llama = dict(bert, num_key_value_heads=2)
    gpt2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=zoo.VOCAB, n_positions=128)
    return [
        pytest.param(lambda: T.GPT2LMHeadModel(T.GPT2Config(**gpt2)), _padded_text, id="gpt2-padding-mask"),
        pytest.param(lambda: T.LlamaModel(T.LlamaConfig(**llama)), _padded_text, id="llama-padding-mask"),
        pytest.param(lambda: T.BertForSequenceClassification(T.BertConfig(**bert)),
                     lambda seq: {"input_ids": zoo._ids(2, seq), "labels": torch.randint(0, 2, (2,))},
                     id="bert-classification-labels"),
        pytest.param(lambda: T.BertModel(T.BertConfig(**bert)),
                     lambda seq: {"input_ids": zoo._ids(2, seq), "output_hidden_states": True,
                                  "output_attentions": True}, id="bert-hidden-states-attentions"),
        pytest.param(lambda: T.LlamaModel(T.LlamaConfig(**llama)),
                     lambda seq: {"input_ids": zoo._ids(2, seq), "output_hidden_states": True}, id="llama-hidden-states"),
        pytest.param(lambda: T.GPT2Model(T.GPT2Config(**gpt2)),
                     lambda seq: {"input_ids": zoo._ids(2, seq), "return_dict": False}, id="gpt2-tuple-output"),
    ]


@pytest.mark.parametrize("build, inputs", _usage_variants())
def test_usage_variants_capture_whole_and_match_eager(build, inputs):
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        call(model, inputs(16))  # eager first: a library that installs hooks on its first call has done so
        compiled = fastcomp.compile(model)
        with CompileCounter() as cc:
            for _ in range(3):
                kw = inputs(16)
                assert_same_output(call(compiled, kw), call(model, kw))
    # One compile; classification stores its problem_type in the config on the first call, which eager made.
    assert (cc.frame_count, cc.graph_count, cc.break_count) == (1, 1, 0), cc.records


@pytest.mark.parametrize("name", ["gpt2-lm-head", "llama-causal-lm-cache"])
def test_greedy_generation_with_a_compiled_forward(name):
    """model.forward compiled, then generate(): the prompt, the first step and the dynamic steps after it (the cache
    grows by one static-length step each: cat of a dynamic and a static tensor) compile 3 entries, the tokens are
    eager's, and a new prompt of the same length compiles nothing."""
    pytest.importorskip("transformers")
    (spec,) = [m for m in zoo.transformers_models() if m.name == name]
    torch.manual_seed(0)
    model = spec.build().eval()
    prompts = [zoo._ids(2, 8) for _ in range(2)]
    with torch.no_grad():
        expected = [model.generate(p, max_new_tokens=12, do_sample=False, pad_token_id=0) for p in prompts]
        model.forward = fastcomp.compile(model.forward)
        with CompileCounter() as cc:
            assert torch.equal(model.generate(prompts[0], max_new_tokens=12, do_sample=False, pad_token_id=0), expected[0])
        assert (cc.frame_count, cc.break_count) == (3, 0), cc.records
        with CompileCounter() as cc:
            assert torch.equal(model.generate(prompts[1], max_new_tokens=12, do_sample=False, pad_token_id=0), expected[1])
        assert cc.frame_count == 0, cc.records
