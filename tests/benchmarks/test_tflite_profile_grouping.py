"""benchmarks/tflite_profile_benchmark.py without perf: how it reads ``perf script`` output, sorts
each sample into a group and labels its rows. (Sampling itself needs perf and is not tested.)"""

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def tool():
    return load_benchmark("tflite_profile_benchmark")


INVOKE = "7f01 tflite::Subgraph::Invoke()"
# Six samples as ``perf script -F ip,sym`` prints them, innermost frame first.
PERF_SCRIPT = "\n\n".join([
    # a product, reached through the while loop: the innermost match wins
    f"7f10 xnn_qd8_f32_qc8w_gemm_minmax_ukernel\n7f11 tflite::ops::builtin::while_kernel::Eval\n{INVOKE}",
    # a copy made by the while loop: memcpy is inside it
    f"7f20 __memmove_avx_unaligned_erms\n7f21 tflite::ops::builtin::while_kernel::CopyTensorsData\n{INVOKE}",
    f"7f30 tflite::ArenaPlanner::PlanAllocations\n{INVOKE}",
    f"7f40 tflite::ops::builtin::topk_v2::Eval\n{INVOKE}",
    f"7f50 some_unknown_symbol\n{INVOKE}",
    # outside the interpreter (Python, start-up): not counted
    "7f60 _PyEval_EvalFrameDefault\n7f61 main",
]) + "\n"


def test_perf_script_blocks_become_stacks_innermost_first(tool):
    stacks = list(tool.stacks_of(PERF_SCRIPT))
    assert len(stacks) == 6
    assert stacks[0] == ["xnn_qd8_f32_qc8w_gemm_minmax_ukernel", "tflite::ops::builtin::while_kernel::Eval",
                         "tflite::Subgraph::Invoke()"]


def test_samples_are_grouped_by_their_innermost_matching_frame(tool):
    result = tool.profile(tool.stacks_of(PERF_SCRIPT))
    assert result["samples"] == 6 and result["samples_in_interpreter"] == 5
    assert result["groups_percent"] == {
        "matrix products": 20.0,
        "memory copies": 20.0,
        "interpreter: re-planning tensors whose shapes change": 20.0,
        "beam search top-k": 20.0,
        "other": 20.0,
    }
    assert result["model_arithmetic_percent"] == 20.0  # only the product is the model's arithmetic


def test_no_sample_inside_the_interpreter_is_an_error(tool):
    with pytest.raises(RuntimeError, match="no sample was inside the interpreter"):
        tool.profile(tool.stacks_of("7f60 _PyEval_EvalFrameDefault\n7f61 main\n"))


def test_models_are_labelled(tool):
    assert tool.labelled("int8, fixed=/m/int8/translator.tflite") == ("int8, fixed", "/m/int8/translator.tflite")
    assert tool.labelled("/m/float/translator.tflite") == ("/m/float/translator.tflite",) * 2


def test_a_missing_model_is_a_usage_error(tool, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--models", f"x={tmp_path / 'missing.tflite'}", "--sentences", str(tmp_path / "dev.tsv")])
    assert exit_info.value.code == 2
    assert "no such model" in capsys.readouterr().err
