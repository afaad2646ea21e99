"""Bayesian LoRA adapters on a small transformer: SGHMC on the LoRA matrices and the classifier
head of a tiny BERT, the rest of the network fixed.

Model: ``BertForSequenceClassification`` built from a ``BertConfig`` (hidden size 32, 2 layers,
2 heads; nothing downloaded) over a hand-made word vocabulary, wrapped by ``peft`` with LoRA
(rank 4) on the attention's query and value projections and a trainable classifier head. Task:
templated sentences ("the film was really good and fun", "a plot that felt dull") padded to a
common length, labelled by their sentiment word; the held-out sentences use templates and
fillers in new combinations. ``ModuleEnergy(model, input_keys=("input_ids", "attention_mask"),
sample=[...LoRA..., ...head...])`` calls ``model(**inputs)`` and reads the ``logits`` of its
``ModelOutput``; ``sm.sample(..., data=(inputs_dict, labels))`` minibatches the dict's tensors
together. Reported: accuracy and NLL on held-out text of the untrained adapters, of the point
estimate (``find_map``) and of the posterior predictive; the reliability diagram is
``lora_text.png``.

    python examples/lora_text.py [--steps N] [--chains C] [--out DIR]

Needs ``transformers`` and ``peft`` (``pip install structmc[hf]``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import structmc as sm
from structmc.diagnostics import plot_calibration, save_figure

POSITIVE = ["good", "great", "fun", "lovely", "superb"]
NEGATIVE = ["bad", "dull", "awful", "boring", "poor"]
FILLER = ["the", "film", "movie", "plot", "was", "is", "really", "quite", "very", "and", "a", "that", "felt", "so"]
VOCAB = ["[PAD]", "[CLS]", *FILLER, *POSITIVE, *NEGATIVE]
TOKEN = {w: i for i, w in enumerate(VOCAB)}
LENGTH = 10  # [CLS] + up to 9 words, padded


def sentences(n: int, generator: torch.Generator) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``n`` sentences of 3 to 8 filler words with one sentiment word at a random place:
    ``({"input_ids": [n, LENGTH], "attention_mask": [n, LENGTH]}, labels [n])`` (1 positive)."""
    ids = torch.zeros(n, LENGTH, dtype=torch.long)
    mask = torch.zeros(n, LENGTH, dtype=torch.long)
    labels = torch.randint(2, (n,), generator=generator)
    for i in range(n):
        words = [
            FILLER[int(j)]
            for j in torch.randint(
                len(FILLER), (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator
            )
        ]
        sentiment = POSITIVE if labels[i] == 1 else NEGATIVE
        at = int(torch.randint(len(words) + 1, (1,), generator=generator))
        words.insert(at, sentiment[int(torch.randint(len(sentiment), (1,), generator=generator))])
        tokens = [TOKEN["[CLS]"], *(TOKEN[w] for w in words)]
        ids[i, : len(tokens)] = torch.tensor(tokens)
        mask[i, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask}, labels


def tiny_lora_bert(seed: int = 0):
    """A 2-layer BERT (hidden 32) from a config, LoRA rank 4 on query/value, a trainable head."""
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=2,
        hidden_dropout_prob=0.0,  # no dropout: a draw's forward is deterministic
        attention_probs_dropout_prob=0.0,
        initializer_range=0.3,  # a random body whose [CLS] output depends on the words (0.02: nearly constant)
    )
    torch.manual_seed(seed)  # the frozen random body and the adapters' initial values
    base = BertForSequenceClassification(config)
    lora = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["query", "value"], modules_to_save=["classifier"]
    )
    return get_peft_model(base, lora).eval()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="SGHMC steps per chain (half burn-in)")
    p.add_argument("--map-steps", type=int, default=200)
    p.add_argument("--map-lr", type=float, default=3e-2)
    p.add_argument("--lr", type=float, default=3e-5, help="SGHMC step size")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--num-train", type=int, default=256)
    p.add_argument("--out", default="runs/examples")
    a = p.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    x, y = sentences(a.num_train, g)
    xt, yt = sentences(512, g)
    model = tiny_lora_bert()
    energy = sm.ModuleEnergy(
        model,
        "categorical",
        prior_std=1.0,
        input_keys=("input_ids", "attention_mask"),  # model(input_ids=..., attention_mask=...)
        sample=["*lora_A*", "*lora_B*", "*classifier.modules_to_save*"],  # the adapters and the head
        chain_evaluation="loop",  # transformers' attention masks branch on the data: vmap refuses them
    )
    start = energy.initial_position()
    untrained = sm.evaluate(energy, start.unsqueeze(0), (xt, yt))
    point = sm.find_map(energy, start, data=(x, y), batch_size=32, num_steps=a.map_steps, lr=a.map_lr)
    at_map = sm.evaluate(energy, point.unsqueeze(0), (xt, yt))
    chain = sm.sample(
        energy,
        point.expand(a.chains, -1),
        sm.SGHMC(a.lr, friction=0.1),
        a.steps,
        data=(x, y),
        batch_size=32,
        num_chains=a.chains,
        burn_in=a.steps // 2,
        thin=max(1, a.steps // 20),
        seed=1,
        progress=False,
    )
    bayes = sm.evaluate(energy, chain, (xt, yt))
    fig = plot_calibration([at_map, bayes], yt, label=["point estimate (LoRA + head)", "SGHMC posterior predictive"])
    fig.suptitle(f"tiny BERT + LoRA, {a.num_train} training sentences", fontsize=10)
    path = save_figure(fig, Path(a.out) / "lora_text.png")
    result = {
        "png": str(path),
        "untrained": untrained["pooled"],
        "map": at_map["pooled"],
        "bayes": bayes["pooled"],
        "sampled_parameters": energy.space.dim,
        "total_parameters": sum(t.numel() for t in model.parameters()),
    }
    for name in ("untrained", "map", "bayes"):
        r = result[name]
        print(f"{name:9s} accuracy {100 * r['accuracy']:.2f}%, NLL {r['nll']:.4f}, ECE {100 * r['ece']:.2f}%")
    print(f"sampled {energy.space.dim} of {result['total_parameters']} parameters; wrote {path}")
    return result


if __name__ == "__main__":
    main()
