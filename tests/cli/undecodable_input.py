"""The --encoding-errors replace check that translate's and score's tests share."""


def outputs_replacing_and_of_replaced(main, model_dir, tmp_path, not_utf8: bytes, replaced_text: str):
    """The output lines of the command ``main`` on ``not_utf8`` with ``--encoding-errors replace``, and on
    ``replaced_text`` (the same with U+FFFD for what is not UTF-8) as a UTF-8 file: each run must exit 0."""
    latin1, replaced = tmp_path / "latin1.txt", tmp_path / "replaced.txt"
    latin1.write_bytes(not_utf8)
    replaced.write_text(replaced_text, encoding="utf-8")
    outputs = []
    for name, args in (("replacing", ["--input", str(latin1), "--encoding-errors", "replace"]),
                       ("of_replaced", ["--input", str(replaced)])):
        output = tmp_path / f"{name}.out"
        assert main(["--model-dir", model_dir, *args, "--output", str(output)]) == 0, name
        outputs.append(output.read_text(encoding="utf-8").splitlines())
    return outputs
