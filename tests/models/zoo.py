"""The model zoo: library models as users build them (from configs, random weights, eval mode), each with a maker of
fresh inputs at a given size. Tiny configs (2 layers) keep the CPU tests fast; the shapes of the code paths are the
real ones. The GPU benchmark harness (benchmarks/zoo.py) builds the same architectures at realistic sizes."""
from dataclasses import dataclass
from typing import Callable

import torch

VOCAB = 1000


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int], dict]  # size -> keyword arguments (the size is a sequence length or a batch)
    sizes: tuple = (16, 24, 32)    # first call, a new size (recompiles once, dynamic), another (compiles nothing)


def _ids(batch, seq):
    return torch.randint(0, VOCAB, (batch, seq))


def _text(seq):
    return {"input_ids": _ids(2, seq)}


def _image(batch):
    return {"pixel_values": torch.randn(batch, 3, 32, 32)}


def _timm_image(batch):
    return (torch.randn(batch, 3, 64, 64),)


def transformers_models():
    import transformers as T

    gpt2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=128)
    llama = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=VOCAB)
    bert = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB)
    vit = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=32,
               patch_size=8)
    t5 = dict(num_layers=2, d_model=64, num_heads=4, d_kv=16, d_ff=128, vocab_size=VOCAB)
    return [
        ZooModel("gpt2-sdpa", lambda: T.GPT2Model(T.GPT2Config(attn_implementation="sdpa", **gpt2)), _text),
        ZooModel("gpt2-eager-attention", lambda: T.GPT2Model(T.GPT2Config(attn_implementation="eager", **gpt2)), _text),
        ZooModel("gpt2-no-cache", lambda: T.GPT2Model(T.GPT2Config(use_cache=False, **gpt2)), _text),
        ZooModel("gpt2-lm-head", lambda: T.GPT2LMHeadModel(T.GPT2Config(**gpt2)), _text),
        ZooModel("bert", lambda: T.BertModel(T.BertConfig(**bert)), _text),
        ZooModel("llama", lambda: T.LlamaModel(T.LlamaConfig(use_cache=False, **llama)), _text),
        ZooModel("llama-causal-lm-cache", lambda: T.LlamaForCausalLM(T.LlamaConfig(**llama)), _text),
        ZooModel("t5", lambda: T.T5Model(T.T5Config(**t5)),
                 lambda seq: {"input_ids": _ids(2, seq), "decoder_input_ids": _ids(2, seq // 2)}),
        ZooModel("vit", lambda: T.ViTModel(T.ViTConfig(**vit)), _image, sizes=(2, 3, 4)),
    ]


def more_transformers_models():
    """Other architectures of the library, built from its registry by model type (AutoConfig.for_model) with tiny
    sizes: the capabilities the zoo needs, checked beyond the models they were built for (rotary and ALiBi
    positions, GQA, parallel attention blocks, mixture of experts, encoder-decoders, disentangled attention, a
    channels-first LayerNorm subclass, a vision transformer with interpolated positions)."""
    import transformers as T

    decoder = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB)
    gqa = dict(decoder, num_key_value_heads=2, head_dim=16)
    configs = {
        "mistral": gqa, "qwen3": gqa, "phi": decoder, "gpt_neox": decoder, "falcon": decoder,
        "mixtral": dict(gqa, num_local_experts=4, num_experts_per_tok=2),
        "bloom": dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=VOCAB),
        "opt": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64,
                    vocab_size=VOCAB),
        "roberta": decoder, "deberta-v2": decoder,
        "squeezebert": dict(decoder, embedding_size=64),
        "bart": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB),
        "dinov2": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8),
    }

    def build(model_type):
        return lambda: T.AutoModel.from_config(T.AutoConfig.for_model(model_type, **configs[model_type]))

    image = {"dinov2"}
    return [ZooModel(t, build(t), _image, sizes=(2, 3, 4)) if t in image else ZooModel(t, build(t), _text)
            for t in configs]


def timm_models():
    import timm

    def build(name, **kw):
        return lambda: timm.create_model(name, pretrained=False, num_classes=10, **kw)

    return [
        ZooModel("timm-resnet18", build("resnet18"), _timm_image, sizes=(2, 3, 4)),
        ZooModel("timm-vit_tiny_patch16_224", build("vit_tiny_patch16_224", img_size=64, depth=2), _timm_image,
                 sizes=(2, 3, 4)),
        ZooModel("timm-convnext_atto", build("convnext_atto"), _timm_image, sizes=(2, 3, 4)),
        # Linear attention in float32 inside `with torch.autocast(device_type=..., enabled=False)`.
        ZooModel("timm-efficientvit_b0", build("efficientvit_b0"), _timm_image, sizes=(2, 3, 4)),
    ]


def torchvision_models():
    """torchvision's own architectures (its model registry, random weights): squeeze-and-excitation, stochastic
    depth, shifted windows with relative position bias, dense concatenation, channel shuffle, and a segmentation
    head that interpolates back to the input's size (a dict output)."""
    import torchvision.models as M

    def build(name, **kw):
        return lambda: M.get_model(name, weights=None, **kw)

    def swin_image(batch):
        return (torch.randn(batch, 3, 96, 96),)

    return [
        ZooModel("tv-mobilenet_v3_small", build("mobilenet_v3_small", num_classes=10), _timm_image, sizes=(2, 3, 4)),
        ZooModel("tv-efficientnet_b0", build("efficientnet_b0", num_classes=10), _timm_image, sizes=(2, 3, 4)),
        ZooModel("tv-shufflenet_v2_x0_5", build("shufflenet_v2_x0_5", num_classes=10), _timm_image, sizes=(2, 3, 4)),
        ZooModel("tv-swin_t", build("swin_t", num_classes=10), swin_image, sizes=(2, 3, 4)),
        ZooModel("tv-lraspp_mobilenet_v3_large",
                 build("lraspp_mobilenet_v3_large", weights_backbone=None, num_classes=5), _timm_image,
                 sizes=(2, 3, 4)),
    ]
