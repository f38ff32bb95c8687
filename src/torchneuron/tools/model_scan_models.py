"""The model zoo of ``torchneuron scan``: every Transformers model type, built from a
tiny random config (nothing is downloaded), and a few Diffusers models.

A model type's default config is shrunk generically (hidden sizes, layers, heads,
vocabulary, image/audio sizes, experts; sub-configs recursively); the model class
is the type's causal-LM class, else its seq2seq-LM class, else its base model.
Inputs are drawn from the forward signature.  What cannot be built this way is
reported with the reason (``BuildError``)."""
from __future__ import annotations

import copy
import inspect

import torch

BATCH, SEQ = 2, 8
MAX_PARAMS = 80_000_000
VOCAB = 96


class BuildError(Exception):
    """The model type cannot be built from a tiny config (the reason is the message)."""


# ---------------------------------------------------------------------------
# the zoo

DIFFUSERS = ["diffusers:unet2d", "diffusers:unet2d_condition", "diffusers:autoencoder_kl",
             "diffusers:transformer2d", "diffusers:ddpm_loop"]


def transformers_types() -> list:
    from transformers.models.auto import modeling_auto as ma

    return sorted(set(ma.MODEL_MAPPING_NAMES) | set(ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
                  | set(ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES))


def all_models() -> list:
    return transformers_types() + DIFFUSERS


def family(name: str) -> str:
    """A coarse family for the per-family table."""
    if name.startswith("diffusers:"):
        return "diffusers"
    from transformers.models.auto import modeling_auto as ma

    if name in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal LM"
    if name in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "seq2seq LM"
    for mapping, fam in (("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "vision-language"),
                         ("MODEL_FOR_IMAGE_MAPPING_NAMES", "vision"),
                         ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "vision"),
                         ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "audio"),
                         ("MODEL_FOR_CTC_MAPPING_NAMES", "audio"),
                         ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "audio"),
                         ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "encoder"),
                         ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "encoder")):
        if name in getattr(ma, mapping, {}):
            return fam
    return "other"


# ---------------------------------------------------------------------------
# shrinking a config

_INT = {
    # widths
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "n_embed": 32,
    "word_embed_proj_dim": 32, "projection_dim": 16, "text_embed_dim": 32, "vision_embed_dim": 32,
    "hidden_dim": 32, "emb_dim": 32, "d_embed": 32, "embedding_size": 32, "proj_dim": 16,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "projection_size": 16, "state_size": 8, "time_step_rank": 4,
    # depth
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
    "first_k_dense_replace": 1,
    # heads
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "attention_head_dim": 8, "d_kv": 8,
    # feed-forward
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
    "d_ff": 64, "n_inner": 64, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "expert_intermediate_size": 32, "mlp_dim": 64,
    # experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_num_experts": 4, "moe_k": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    # vocabulary and lengths
    "vocab_size": VOCAB, "max_position_embeddings": 64, "n_positions": 64, "n_ctx": 64,
    "max_source_positions": 32, "max_target_positions": 64, "type_vocab_size": 2,
    # images
    "image_size": 32, "patch_size": 8, "num_channels": 3,
    # audio
    "num_mel_bins": 16, "feature_size": 16,
}
_KEEP_IF_SMALLER = {"num_channels", "type_vocab_size", "first_k_dense_replace"}
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
              "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")


def _sub_configs(cfg):
    from transformers import PretrainedConfig

    for k, v in list(vars(cfg).items()):
        if isinstance(v, PretrainedConfig):
            yield k, v


# the milder variant (tried when the tiny one does not run on the CPU): depth, experts,
# vocabulary and lengths only, widths as the type's default
_MILD = {k for k in _INT if k in (
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
    "num_decoder_layers", "num_encoder_layers", "first_k_dense_replace", "num_experts",
    "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_num_experts",
    "n_shared_experts", "n_group", "topk_group", "moe_k", "vocab_size", "max_position_embeddings",
    "n_positions", "n_ctx", "max_target_positions", "type_vocab_size")}
VARIANTS = ("tiny", "mild")


def shrink(cfg, depth=0, variant="tiny"):
    """Shrink `cfg` in place (and its sub-configs)."""
    d = vars(cfg)
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    mrope = rope.get("mrope_section") if isinstance(rope, dict) else None
    for k, v in _INT.items():
        if variant == "mild" and k not in _MILD:
            continue
        if k in d and isinstance(d[k], int) and not isinstance(d[k], bool):
            if k in _KEEP_IF_SMALLER and d[k] <= v:
                continue
            if k == "num_key_value_heads" and d[k] == d.get("num_attention_heads"):
                setattr(cfg, k, _INT["num_attention_heads"])  # MHA stays MHA
                continue
            setattr(cfg, k, v)
    if variant == "tiny" and mrope:
        # multimodal RoPE sections must fill the rotary part of each head
        frac = d.get("partial_rotary_factor") or rope.get("partial_rotary_factor") or 1.0
        hd = int(round(2 * sum(mrope) / frac))
        if isinstance(d.get("head_dim"), int):
            cfg.head_dim = hd
        elif isinstance(d.get("num_attention_heads"), int) and isinstance(d.get("hidden_size"), int):
            cfg.hidden_size = cfg.num_attention_heads * hd
    if variant == "mild":
        for k in ("depths", "layers_per_stage"):
            if k in d and isinstance(d[k], (list, tuple)) and d[k] and isinstance(d[k][0], int):
                setattr(cfg, k, [1] * len(d[k]))
    # lists of per-stage sizes (Swin, ConvNeXt, ResNet, ...): keep the stage count
    for k in ("depths", "num_heads", "hidden_sizes", "embed_dims", "layers_per_stage"):
        if variant == "tiny" and k in d and isinstance(d[k], (list, tuple)) and d[k] and isinstance(d[k][0], int):
            n = len(d[k])
            setattr(cfg, k, {"depths": [1] * n, "num_heads": [2] * n, "layers_per_stage": [1] * n}
                    .get(k, [16 * (i + 1) for i in range(n)]))
    for k in _TOKEN_IDS:
        if isinstance(d.get(k), int) and d[k] >= VOCAB:
            setattr(cfg, k, min(d[k], VOCAB - 1) if k != "pad_token_id" else 1)
    for k in ("image_token_id", "image_token_index", "video_token_id", "audio_token_id",
              "boi_token_id", "eoi_token_id", "vision_start_token_id", "vision_end_token_id"):
        if isinstance(d.get(k), int) and d[k] >= VOCAB:
            setattr(cfg, k, VOCAB - 2)
    if "layer_types" in d and isinstance(d["layer_types"], list):
        n = next((getattr(cfg, k) for k in ("num_hidden_layers", "num_layers", "n_layer")
                  if isinstance(d.get(k), int)), None)
        if n:
            cfg.layer_types = list(d["layer_types"][:n])
            if len(cfg.layer_types) < n:
                cfg.layer_types += [cfg.layer_types[-1]] * (n - len(cfg.layer_types))
    # dropout off: the CPU and the device must see the same computation
    for k, v in list(d.items()):
        if isinstance(v, float) and ("dropout" in k or k.endswith("_pdrop") or k == "layerdrop"):
            setattr(cfg, k, 0.0)
    if depth < 3:
        for _, sub in _sub_configs(cfg):
            shrink(sub, depth + 1, variant)
    return cfg


# ---------------------------------------------------------------------------
# building a model and its inputs

def model_class(model_type: str):
    import transformers
    from transformers.models.auto import modeling_auto as ma

    for kind, mapping in (("causal", ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
                          ("seq2seq", ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
                          ("base", ma.MODEL_MAPPING_NAMES)):
        name = mapping.get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name:
            cls = getattr(transformers, name, None)
            if cls is None:
                raise BuildError(f"transformers has no class {name}")
            return kind, cls
    raise BuildError("no model class for this type")


def tiny_config(model_type: str, variant: str = "tiny"):
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.for_model(model_type)
    except Exception as e:  # noqa: BLE001
        raise BuildError(f"default config: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return shrink(cfg, variant=variant)


def _cfg_get(cfg, *names, default=None):
    for obj in (cfg, *[s for _, s in _sub_configs(cfg)]):
        for n in names:
            v = getattr(obj, n, None)
            if v is not None and not isinstance(v, bool):
                return v
    return default


def make_inputs(model, kind: str, generator: torch.Generator) -> list:
    """Candidate input dicts, most specific first (the caller keeps the first the CPU runs)."""
    cfg = model.config
    params = inspect.signature(model.forward).parameters
    vocab = _cfg_get(cfg, "vocab_size", default=VOCAB)
    ids = torch.randint(3, max(4, min(vocab, VOCAB) - 3), (BATCH, SEQ), generator=generator)
    have = {}
    if "input_ids" in params:
        have["input_ids"] = ids
    if "decoder_input_ids" in params and kind != "causal":
        have["decoder_input_ids"] = ids[:, :5].clone()
    main = getattr(model, "main_input_name", "input_ids")
    if "pixel_values" in params:
        ch = _cfg_get(cfg, "num_channels", default=3)
        size = _cfg_get(cfg, "image_size", default=32)
        if isinstance(size, (list, tuple)):
            size = size[0]
        have["pixel_values"] = torch.randn(BATCH, ch, size, size, generator=generator)
    if "noise" in params and "pixel_values" in have:  # ViTMAE-style random masking: given
        size, patch = _cfg_get(cfg, "image_size", default=32), _cfg_get(cfg, "patch_size", default=8)
        if isinstance(size, int) and isinstance(patch, int):
            have["noise"] = torch.rand(BATCH, (size // patch) ** 2, generator=generator)
    if "input_values" in params:
        have["input_values"] = torch.randn(BATCH, 3840, generator=generator)
    if "input_features" in params:
        mel = _cfg_get(cfg, "num_mel_bins", "feature_size", "input_feat_per_channel", default=16)
        src = _cfg_get(cfg, "max_source_positions", default=32)
        if main == "input_features" and _cfg_get(cfg, "input_feat_per_channel") is not None:
            have["input_features"] = torch.randn(BATCH, 40, mel, generator=generator)
        else:
            have["input_features"] = torch.randn(BATCH, mel, 2 * src, generator=generator)
    cands = []
    if main in have:
        first = {main: have[main]}
        for extra in ("decoder_input_ids", "noise"):
            if extra in have:
                first[extra] = have[extra]
        cands.append(first)
    if have and have not in cands:
        cands.append(dict(have))
    if not cands:
        raise BuildError(f"no known input among the forward's parameters (main input {main!r})")
    return cands


def build_transformers(model_type: str, seed: int = 0, variant: str = "tiny"):
    """(kind, model in fp32 eval mode on the CPU, input candidates)."""
    kind, cls = model_class(model_type)
    cfg = tiny_config(model_type, variant)
    try:
        # count the parameters on the meta device first: a config that stays large must
        # not take the machine's memory
        with torch.device("meta"):
            nparams = sum(p.numel() for p in cls(copy.deepcopy(cfg)).parameters())
        if nparams > MAX_PARAMS:
            raise BuildError(f"the shrunk model still has {nparams / 1e6:.0f}M parameters")
        torch.manual_seed(seed)
        model = cls(cfg)
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001
        raise BuildError(f"tiny model: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    model.eval()
    _break_ties(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    return kind, model, make_inputs(model, kind, g)


def _break_ties(model, seed):
    """Add small noise to constant parameters (zero biases, zero-initialised routers,
    unit norms): a zero router gate makes every expert score equal, and which of equal
    scores `topk` returns is unspecified (CPU and CUDA differ); random values are also
    a stronger check than zeros and ones."""
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel() > 1:
                flat = p.reshape(-1)
                if bool((flat == flat[0]).all()):
                    p.add_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype) * 0.02)


# ---------------------------------------------------------------------------
# diffusers

def build_diffusers(name: str, seed: int = 0):
    import diffusers

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    which = name.split(":", 1)[1]
    if which in ("unet2d", "ddpm_loop"):
        model = diffusers.UNet2DModel(
            sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
            block_out_channels=(32, 64), norm_num_groups=8,
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        inputs = {"sample": torch.randn(BATCH, 3, 16, 16, generator=g),
                  "timestep": torch.tensor([10, 500])}
    elif which == "unet2d_condition":
        model = diffusers.UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(32, 64), norm_num_groups=8, cross_attention_dim=32,
            attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
        inputs = {"sample": torch.randn(BATCH, 4, 16, 16, generator=g),
                  "timestep": torch.tensor([10, 500]),
                  "encoder_hidden_states": torch.randn(BATCH, 6, 32, generator=g)}
    elif which == "autoencoder_kl":
        model = diffusers.AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
            norm_num_groups=8, layers_per_block=1,
            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
        inputs = {"sample": torch.randn(BATCH, 3, 16, 16, generator=g), "sample_posterior": False}
    elif which == "transformer2d":
        model = diffusers.DiTTransformer2DModel(
            num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            num_layers=2, sample_size=8, patch_size=2, norm_num_groups=4, num_embeds_ada_norm=1000)
        inputs = {"hidden_states": torch.randn(BATCH, 4, 8, 8, generator=g),
                  "timestep": torch.tensor([10, 500]), "class_labels": torch.tensor([1, 3])}
    else:
        raise BuildError(f"unknown diffusers model {which!r}")
    model.eval()
    return ("pipeline" if which == "ddpm_loop" else "diffusers"), model, [inputs]


def ddpm_loop(model, device, steps=3, seed=0):
    """A tiny DDPM sampling loop: the scheduler and the UNet on `device`."""
    import diffusers

    sched = diffusers.DDPMScheduler(num_train_timesteps=50)
    sched.set_timesteps(steps)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 3, 16, 16, generator=g).to(device)
    for t in sched.timesteps:
        with torch.no_grad():
            eps = model(x, t.to(device)).sample
        x = sched.step(eps, t, x, generator=torch.Generator().manual_seed(seed + int(t))).prev_sample
    return x


def build(name: str, seed: int = 0, variant: str = "tiny"):
    if name.startswith("diffusers:"):
        if variant != "tiny":
            raise BuildError("one variant only")
        return build_diffusers(name, seed)
    return build_transformers(name, seed, variant)
