"""A Hugging Face Trainer run for tests/test_huggingface.py (one per process: Accelerate's
state is a process singleton).  Prints one JSON line.

    python hf_trainer.py MODEL OUT [--cpu] [--compile] [--bf16] [--steps N]
                         [--save-steps N] [--resume DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          Trainer, TrainingArguments)

VOCAB = 64


def build(name):
    torch.manual_seed(0)
    if name == "gpt2":  # tied wte / lm_head
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         bos_token_id=0, eos_token_id=0)
        return GPT2LMHeadModel(cfg)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
                      pad_token_id=0)
    return LlamaForCausalLM(cfg)


class Tokens(Dataset):
    def __init__(self, n=48, length=16):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(1, VOCAB, (n, length), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=0)
    p.add_argument("--resume", default=None)
    a = p.parse_args()
    model = build(a.model)
    args = TrainingArguments(
        output_dir=a.out, per_device_train_batch_size=4, max_steps=a.steps, learning_rate=1e-2,
        logging_steps=1, report_to=[], seed=0, data_seed=0, disable_tqdm=True,
        use_cpu=a.cpu, torch_compile=a.compile, bf16=a.bf16,
        save_strategy="steps" if a.save_steps else "no", save_steps=a.save_steps or 500)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train(resume_from_checkpoint=a.resume)
    m = trainer.model
    head, emb = m.get_output_embeddings().weight, m.get_input_embeddings().weight
    print(json.dumps({
        "device": str(args.device), "backend": args.torch_compile_backend,
        "pin_memory": args.dataloader_pin_memory,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "tied": head is emb,
        "params": {k: v.detach().float().cpu().reshape(-1)[:8].tolist()
                   for k, v in m.state_dict().items()},
        "param_device": str(next(m.parameters()).device),
    }))


if __name__ == "__main__":
    main()
