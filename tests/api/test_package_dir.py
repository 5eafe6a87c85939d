"""`dir(tapt)` lists the public API and nothing else."""

import subprocess
import sys


def test_dir_of_tapt_is_its_public_api():
    code = ("import tapt, tapt.api, tapt.retriever.methods; tapt.Index; "
            "print(sorted(dir(tapt)) == sorted(tapt.__all__), "
            "[n for n in dir(tapt) if n.startswith('_') and n != '__version__'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "[]"]


def test_every_public_name_resolves():
    import tapt

    for name in tapt.__all__:
        assert getattr(tapt, name) is not None


def test_one_public_surface():
    """`tapt.api.__all__` is the part of `tapt.__all__` that `tapt.api` holds, nothing more: the
    command line's option metadata lives in `tapt.api.options`, outside both."""
    import tapt
    import tapt.api

    from_api = [name for name in tapt.__all__ if tapt._LAZY.get(name) == "tapt.api"]
    assert sorted(tapt.api.__all__) == sorted(from_api)
    assert not {"config_fields", "method_params", "method_specs", "LIMITS"} & set(tapt.api.__all__)
