import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
if "PYTEST_XDIST_WORKER" in os.environ:
    # Tests run in parallel, one per core (pytest -n): one thread each, and for the
    # processes they start, so that they do not fight over the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

if "PYTEST_XDIST_WORKER" in os.environ:
    torch.set_num_threads(1)

from modformer.config import load_config  # noqa: E402
from slurm_cluster import slurm_cluster  # noqa: E402, F401  (the Slurm tests' cluster, one per session)
from failing_disk import ext4_disk, small_disk  # noqa: E402, F401  (the storage-fault tests' disks)


@pytest.fixture(autouse=True)
def restore_global_torch_state():
    """Tests may change torch's global RNG, dtype or threads; put them back."""
    rng, dtype, threads = torch.get_rng_state(), torch.get_default_dtype(), torch.get_num_threads()
    yield
    torch.set_rng_state(rng)
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


TINY = [
    "model.d_model=64", "model.n_layers=2", "model.n_heads=4",
    "task.n_pairs=4", "task.test_size=500",
    "train.steps=12", "train.batch_size=32", "train.lr=3e-3", "train.warmup_steps=2",
    "train.eval_every=6", "train.log_every=3", "train.checkpoint_every=4", "train.progress=false",
    "train.eval_batch_size=250",
]


@pytest.fixture
def tiny_config():
    def make(*overrides):
        return load_config(None, [*TINY, *overrides])

    return make


def pretrained_settings(teacher) -> dict:
    """The knowledge-pretrained settings that read `tiny_teacher`: its folder, its corpus, two
    evaluation blocks of 16 tokens."""
    return {"model": str(teacher), "corpus": str(teacher / "corpus.txt"), "eval_blocks": 2, "block_len": 16}


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A local folder holding a 2-layer random Llama and a word-level tokenizer of the facts and
    corpus: the modules tests' teacher (no download)."""
    from modformer.data.facts import all_facts
    from modules_fixtures import CORPUS

    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")

    folder = tmp_path_factory.mktemp("teacher")
    words = sorted({w for f in all_facts() for w in f.text.split()} | {w for t in CORPUS for w in t.split()})
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]")
    raw = tokenizers.Tokenizer(model)
    raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    raw.decoder = tokenizers.decoders.WordPiece()  # joins words with spaces
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[UNK]")
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(words) + 1, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True))
    llama.save_pretrained(folder)
    tok.save_pretrained(folder)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    return folder
