"""Check that the oracle environment holds exactly the pinned oracles and that
each one works: deepseek-recipe renders a Chat Completions request, tokenizers
trains and round-trips a byte-level BPE. Run by ctest with the oracle venv's python.
"""
import importlib.metadata
import pathlib
import sys

REQUIREMENTS = pathlib.Path(__file__).with_name("requirements.txt")


def pins():
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            yield name, version


def main():
    failed = False
    for name, version in pins():
        got = importlib.metadata.version(name)
        if got != version:
            print(f"FAIL: {name} is {got}, pinned {version}")
            failed = True

    import deepseek_recipe as dr

    body = {"model": "DeepSeek-V4-Pro",
            "messages": [{"role": "user", "content": "hello"}]}
    conv = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
    prompt = dr.DeepseekV4Encoding().render_conversation(conv.conversation).prompt
    if "hello" not in prompt or "<｜User｜>" not in prompt:
        print(f"FAIL: deepseek-recipe rendered {prompt!r}")
        failed = True

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["deepinfer runs DeepSeek models"] * 4,
                            trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    text = "DeepSeek 中文 😀"
    if tok.decode(tok.encode(text).ids) != text:
        print("FAIL: tokenizers byte-level BPE did not round-trip")
        failed = True

    print("oracles: " + ", ".join(f"{n}=={v}" for n, v in pins()) + (" FAILED" if failed else " ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
