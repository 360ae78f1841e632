"""Real peak memory and step time of Hugging Face Llama models on one GPU (how hf-llama/truth.jsonl was measured).

Independent of the project: builds Hugging Face LlamaForCausalLM models from configs, trains a
few steps (AdamW, bf16 autocast over fp32 master weights, optional activation checkpointing)
and runs inference forwards with a KV cache, recording torch.cuda.max_memory_allocated /
max_memory_reserved and the median step time. Writes one JSON line per case and each case's
config.json, so the project's estimator can be run on exactly the same shapes afterwards.

Usage: python gpu_truth.py OUTDIR [--quick]
"""

import json, os, statistics, sys, time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

OUT = sys.argv[1]
QUICK = "--quick" in sys.argv
os.makedirs(OUT, exist_ok=True)
dev = "cuda" if torch.cuda.is_available() else "cpu"

SHAPES = {  # name: (hidden, layers, heads, kv_heads, ffn, vocab)
    "llama-160m": (768, 12, 12, 12, 2048, 32000),
    "llama-1b-gqa": (2048, 16, 32, 8, 5632, 32000),
}
if QUICK:
    SHAPES = {"llama-tiny": (128, 2, 4, 2, 256, 1000)}

TRAIN = [  # (shape, micro_batch, seq, recompute)
    (s, b, t, r)
    for s in SHAPES
    for (b, t) in ([(1, 128)] if QUICK else [(4, 1024), (8, 2048), (1, 4096)])
    for r in (False, True)
]
INFER = [(s, b, t) for s in SHAPES for (b, t) in ([(1, 64)] if QUICK else [(1, 4096), (16, 2048), (64, 512)])]


def config(name):
    h, L, a, kv, f, v = SHAPES[name]
    return LlamaConfig(
        hidden_size=h,
        num_hidden_layers=L,
        num_attention_heads=a,
        num_key_value_heads=kv,
        intermediate_size=f,
        vocab_size=v,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def reset():
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peaks():
    if dev != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def emit(rec):
    print(json.dumps(rec), flush=True)
    with open(os.path.join(OUT, "truth.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


for name in SHAPES:
    with open(os.path.join(OUT, f"{name}.config.json"), "w") as f:
        f.write(config(name).to_json_string())

for name, b, t, rc in TRAIN:
    reset()
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(config(name))
        if rc:
            model.gradient_checkpointing_enable()
        model.config.use_cache = False
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=(dev == "cuda"))
        x = torch.randint(0, model.config.vocab_size, (b, t), device=dev)
        times = []
        for step in range(3 if QUICK else 8):
            if step == 2:
                reset_peak = True
                if dev == "cuda":
                    torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.perf_counter()
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            times.append(time.perf_counter() - t0)
        alloc, reserved = peaks()
        n = sum(p.numel() for p in model.parameters())
        emit(
            {
                "kind": "train",
                "model": name,
                "params": n,
                "micro_batch": b,
                "seq": t,
                "recompute": "full" if rc else "none",
                "precision": "bf16-amp",
                "optimizer": "adamw",
                "peak_allocated": alloc,
                "peak_reserved": reserved,
                "step_s": statistics.median(times[2:]),
                "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                "torch": torch.__version__,
            }
        )
    except torch.OutOfMemoryError:
        emit(
            {
                "kind": "train",
                "model": name,
                "micro_batch": b,
                "seq": t,
                "recompute": "full" if rc else "none",
                "oom": True,
            }
        )
    except Exception as e:  # record and go on: one broken case must not cost the rest
        emit({"kind": "train", "model": name, "micro_batch": b, "seq": t, "error": repr(e)[:300]})
    finally:
        model = opt = x = loss = None

for name, b, t in INFER:
    reset()
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(config(name)).to(dtype=torch.bfloat16).eval()
        x = torch.randint(0, model.config.vocab_size, (b, t), device=dev)
        with torch.no_grad():
            for _ in range(2):
                out = model(input_ids=x, use_cache=True)
                out = None
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.perf_counter()
            out = model(input_ids=x, use_cache=True)
            sync()
            dt = time.perf_counter() - t0
        alloc, reserved = peaks()
        emit(
            {
                "kind": "infer",
                "model": name,
                "batch": b,
                "context": t,
                "precision": "bf16",
                "peak_allocated": alloc,
                "peak_reserved": reserved,
                "prefill_s": dt,
                "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                "torch": torch.__version__,
            }
        )
    except torch.OutOfMemoryError:
        emit({"kind": "infer", "model": name, "batch": b, "context": t, "oom": True})
    except Exception as e:
        emit({"kind": "infer", "model": name, "batch": b, "context": t, "error": repr(e)[:300]})
    finally:
        model = x = out = None
