"""`--device auto|cpu|cuda` on the trainers and hermes_eval: validated in the configs, resolved before any model
work, bf16 never on a CPU. What a CPU machine can check: asking for CUDA where there is none (CUDA_VISIBLE_DEVICES
empties the device list, so this holds on a GPU machine too) is one line and exit 2, not a torch traceback."""
from __future__ import annotations

import pytest

import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)


def test_device_values_are_validated_in_every_config():
    from lachesis.demo import DemoConfig
    from trainers.sft.config import InstructConfig, SFTConfig
    from trainers.runtime.errors import TrainerInputError
    from trainers.eval.config import EvalSettings

    assert SFTConfig(data="x").device == "auto"
    assert EvalSettings(device=" CUDA:1 ").device == "cuda:1"
    assert InstructConfig(data="x", device="cpu").device == "cpu"
    for make in (lambda d: SFTConfig(data="x", device=d), lambda d: EvalSettings(device=d),
                 lambda d: InstructConfig(data="x", method="dpo", device=d), lambda d: DemoConfig(device=d)):
        for bad in ("tpu", "cuda:x", ""):
            with pytest.raises(TrainerInputError, match="unknown --device"):
                make(bad)


def test_cpu_means_float32_and_cpu_trainer_arguments():
    import torch

    from trainers.runtime.device import cpu_defaults, device, load_dtype

    cpu = device("cpu")
    assert cpu == torch.device("cpu") and load_dtype(cpu) is torch.float32
    args = cpu_defaults(cpu)
    assert (args["bf16"], args["fp16"], args["use_cpu"], args["dataloader_pin_memory"]) == (False, False, True, False)
    assert device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_load_model_puts_float32_weights_on_the_device(tiny_dir):  # noqa: F811
    import torch

    from trainers.runtime.device import device
    from trainers.modeling.models import load_model

    model = load_model(str(tiny_dir), device=device("cpu"))
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cpu", torch.float32)}


def test_cuda_where_there_is_none_is_one_line():
    import torch

    from trainers.runtime.device import device
    from trainers.runtime.errors import TrainerInputError

    if not torch.cuda.is_available():
        with pytest.raises(TrainerInputError, match=r"^--device cuda: .*use --device cpu or --device auto$"):
            device("cuda")
    with pytest.raises(TrainerInputError, match=r"--device cuda:\d+"):
        device(f"cuda:{torch.cuda.device_count() + 3}")


@pytest.mark.parametrize("script,args", [
    ("hermes_eval", ["--model", "tiny", "--no-lake", "--limit", "1"]),
    ("rl_finetune_supervised", ["--model", "tiny", "--data", "sft", "--no-lake", "--max-steps", "1"]),
])
def test_cli_device_cuda_without_cuda_is_one_line_exit_2(script, args):
    out = th.run_cli(script, *args, "--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(lines) == 1 and "--device cuda:" in lines[0] and "--device cpu" in lines[0], lines
