"""Score gibbs-augment's FMNIST chains on the MNIST test set, as the reference code's FMNIST
augmentation settings do (datasets.MNIST in fashion_mnist/setting4, setting5): evidence for the
record, not part of the experiment."""
import sys

from structmc_papers import _common as fnbg
from structmc_papers import gibbs_augment as ga
from structmc.predictive import predictive
from structmc.storage import RunFolder
from structmc.zoo import energy_for

OUT = sys.argv[1]  # the run folder of `structmc reproduce gibbs-augment --preset converged --out OUT`
cfg = ga.PRESETS["converged"]
energy = energy_for("mlp_gibbs", seed=cfg.seed)
mnist = fnbg.load_images("mnist", cfg)
fm = fnbg.load_images("fashion-mnist", cfg)
for t in ("none", "rotation", "blur", "inversion"):
    chain = RunFolder(f"{OUT}/chains/fashion-mnist-{t}").load_chain()
    keep = chain.draw_steps > cfg.num_steps - cfg.predict_window
    P = chain.samples.shape[-1]
    draws = chain.samples[:, keep].reshape(-1, P)
    out = {}
    for name, d in (("FMNIST test", fm), ("MNIST test", mnist)):
        _, x_te, _ = fnbg.standardize(fm.x_train, d.x_test, "test")  # the test set by its own statistics
        probs = predictive(energy, draws, x_te)["probs"]
        out[name] = float((probs.argmax(-1) == d.y_test).double().mean())
    print(f"FMNIST chain, {t}: {draws.shape[0]} draws; accuracy on FMNIST test {out['FMNIST test']:.4f}, on MNIST test {out['MNIST test']:.4f}")
