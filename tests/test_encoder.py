import numpy as np
import pytest

from indexer.errors import TaptError
from indexer.models import DEFAULT_MODEL, display_name, packaged_default_path, resolve_model


def test_default_model_resolves_to_the_packaged_directory():
    path = resolve_model(None)
    assert path == str(packaged_default_path()) == resolve_model(DEFAULT_MODEL)
    assert display_name(None) == DEFAULT_MODEL
    assert display_name("org/some-model") == "org/some-model"


def test_cuda_request_without_gpu_is_a_clear_error():
    torch = pytest.importorskip("torch")
    from indexer.encoder import pick_device

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(TaptError, match="sees no CUDA GPU"):
        pick_device("cuda")
    assert pick_device("auto") == "cpu"


@pytest.fixture(scope="session")
def minilm():
    from indexer.encoder import SentenceTransformerEncoder

    return SentenceTransformerEncoder(None, device="cpu")


def test_real_encoder_embeds_normalised_and_counts_tokens(minilm):
    emb = minilm.encode(["A short sentence.", "Another, slightly longer sentence here."])
    assert emb.shape == (2, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    counts = minilm.token_counts(["word " * 300, "hi"])
    assert counts[0] > minilm.max_length == 256 and counts[1] == 3
    assert len(minilm.weights_sha256) == 64 and minilm.name == DEFAULT_MODEL


def test_missing_model_directory_is_an_input_error(tmp_path):
    from indexer.encoder import SentenceTransformerEncoder
    from indexer.errors import InputError

    (tmp_path / "empty-model").mkdir()
    with pytest.raises(InputError, match="cannot load model"):
        SentenceTransformerEncoder(str(tmp_path / "empty-model"), device="cpu")
