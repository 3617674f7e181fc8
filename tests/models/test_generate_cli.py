"""`eventtensor generate`: a named config or a checkpoint folder (with a tokenizer), greedy
tokens through the decode program on the interpreter, checked against the numpy reference
model with the same weights."""
import pytest

from eventtensor.cli import main
from eventtensor.models.config import get_config
from eventtensor.models.reference import ReferenceModel
from eventtensor.models.weights import random_weights, save_checkpoint


def _tokens(out: str) -> list[list[int]]:
    """The new token ids of each request line `[i] prompt -> new  'text'`."""
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    return [[int(t) for t in ln.split(" -> ")[1].split()[0].split(",")] for ln in lines]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_named_config_generates_the_reference_tokens(capsys, name):
    args = ["generate", "--model", name, "--prompt-ids", "1,2,3", "--prompt-ids", "7",
            "--prompt-ids", "250,4", "--max-new-tokens", "6", "--seed", "3"]
    assert main(args) == 0
    got = _tokens(capsys.readouterr().out)
    config = get_config(name)
    ref = ReferenceModel(config, random_weights(config, 3))
    assert got == ref.greedy_generate([[1, 2, 3], [7], [250, 4]], 6)
    assert main(args + ["--batch", "1"]) == 0  # one request at a time: the same tokens
    assert _tokens(capsys.readouterr().out) == got
    for step_tokens in ("3", "8"):  # prompts one token a step; prompts in whole chunks
        assert main(args + ["--step-tokens", step_tokens]) == 0
        assert _tokens(capsys.readouterr().out) == got


def test_checkpoint_folder_with_tokenizer_takes_text_prompts(tmp_path, capsys):
    tokenizers = pytest.importorskip("tokenizers")
    config = get_config("tiny-llama")
    weights = random_weights(config, 5)
    save_checkpoint(tmp_path, config, weights, dtype="bfloat16")
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, config.vocab_size)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    tok.save(str(tmp_path / "tokenizer.json"))
    assert main(["generate", "--model", str(tmp_path), "--prompt", "w12 w40 w3",
                 "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    [new] = _tokens(out)
    assert new == ReferenceModel(config, weights).greedy_generate([[12, 40, 3]], 4)[0]
    assert "12,40,3 -> " in out and repr(tok.decode(new)) in out


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model", "--prompt-ids", "1"], "neither a checkpoint folder nor a "
                                                         "named config"),
    (["--model", "tiny-llama"], "give --prompt-ids"),
    (["--model", "tiny-llama", "--prompt", "hello"], "has no tokenizer.json"),
    (["--model", "tiny-llama", "--prompt-ids", "300"],
     "prompt 0: token id 300 is outside the vocabulary [0, 256)"),
    (["--model", "tiny-llama", "--prompt-ids", "1", "--prompt-ids", "2", "--step-tokens", "1"],
     "step_tokens 1 must be at least the batch (2)"),
])
def test_bad_generate_arguments_are_named(capsys, args, message):
    assert main(["generate", *args]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--prompt-ids", "1", "--max-new-tokens", "0"],
     "--max-new-tokens: must be a positive integer, got '0'"),
    (["--prompt-ids", "1", "--batch", "0"], "--batch: must be a positive integer, got '0'"),
    (["--prompt-ids", "1", "--step-tokens", "x"],
     "--step-tokens: must be a positive integer, got 'x'"),
    (["--prompt-ids", "1,,2"], "'1,,2' is not a comma-separated list of token ids"),
    (["--prompt-ids", "-1"], "'-1' is not a comma-separated list of token ids"),
])
def test_malformed_generate_arguments_stop_the_parser(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--model", "tiny-llama", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_gpu_device_without_a_gpu_is_a_clear_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tests/gpu/test_decode.py covers the GPU path")
    assert main(["generate", "--model", "tiny-llama", "--prompt-ids", "1", "--device",
                 "gpu"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bench_runs_the_named_benchmark_script(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "decode", "--help"])
    assert exit_.value.code == 0
    assert "decode_bench.py" in capsys.readouterr().out
