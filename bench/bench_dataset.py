"""Step time with the data in a map-style Dataset (gathered on the CPU per step, pinned, moved
to the device, next batch prefetched in a thread) against the same data as in-memory device
tensors, side by side in one run.

CIFAR-10-sized by default: 50,000 images 3×32×32 (random values: only the sizes matter),
ResNet-20 (BatchNorm), batch 128, SGLD. The Dataset returns one (image, label) per index
from a CPU uint8 tensor converted to float per item, as a torchvision-style dataset does.

    python bench/bench_dataset.py [--device cuda] [--steps 20] [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import interleaved_seconds_per_step, write_json  # noqa: E402

import structmc as sm  # noqa: E402
from structmc.models.resnet import resnet20  # noqa: E402


class Images(Dataset):
    def __init__(self, images_uint8, labels):
        self.images, self.labels = images_uint8, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i].float().div_(255), self.labels[i]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-data", type=int, default=50_000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (a.num_data, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (a.num_data,), generator=g)
    torch.manual_seed(0)
    energy = sm.ModuleEnergy(resnet20(10, in_channels=3), "categorical", num_data=a.num_data).to(a.device)
    on_device = (images.float().div_(255).to(a.device), labels.to(a.device))
    runs = {
        "in-memory tensors": sm.Run(energy, None, sm.SGLD(1e-6), data=on_device, batch_size=a.batch_size, seed=1),
        "Dataset, prefetch": sm.Run(
            energy, None, sm.SGLD(1e-6), data=sm.DataSource(Images(images, labels)), batch_size=a.batch_size, seed=1
        ),
        "Dataset, no prefetch": sm.Run(
            energy,
            None,
            sm.SGLD(1e-6),
            data=sm.DataSource(Images(images, labels), prefetch=False),
            batch_size=a.batch_size,
            seed=1,
        ),
    }

    def stepper(run):
        def go(n):
            for _ in range(n):
                run.step()
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()

        return go

    t = interleaved_seconds_per_step({k: stepper(r) for k, r in runs.items()}, a.steps, a.rounds)
    ref = t["in-memory tensors"]
    rows = {k: {"ms_per_step": 1000 * v, "ratio": v / ref} for k, v in t.items()}
    print(
        f"device {a.device}, N = {a.num_data}, batch {a.batch_size}, ResNet-20, SGLD; torch threads "
        f"{torch.get_num_threads()}"
    )
    for k, r in rows.items():
        print(f"{k:22s} {r['ms_per_step']:8.2f} ms/step   ratio {r['ratio']:.3f}")
    write_json(a.json, rows)


if __name__ == "__main__":
    main()
