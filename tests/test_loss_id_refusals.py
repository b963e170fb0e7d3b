"""A2A141 says why a `loss_id` that is not an integer literal is refused: a helper's parameter (its callers
pick the scaler), one optimizer under an id that varies (several scales summed in one `.grad`), or an id
computed at run time with optimizers that vary with it."""
import os
import subprocess
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "amp_losses")


def _line(name):
    res = subprocess.run([sys.executable, "-m", "migrate", "check", os.path.join(FIXTURES, name)],
                         capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    return next(ln for ln in res.stdout.splitlines() if "A2A141" in ln)


def test_helper_parameter_names_the_helper():
    ln = _line("loss_id_helper_parameter.unchanged.py")
    assert "`loss_id=which` is a parameter of `backward_of`" in ln, ln
    assert "pass the GradScaler (`scalers[k]`) to `backward_of`" in ln, ln
    assert "(the calls in this module pass 0, 1)" in ln, ln


def test_shared_optimizer_with_a_computed_id_says_one_scale_cannot_serve_and_offers_one_scaler():
    # (an id read from a dict, `loss_id=scaler_of[task]`, migrates to one GradScaler: A2A184)
    ln = _line("loss_id_from_a_call.unchanged.py")
    assert "`loss_id=pick_scaler(task)`" in ln and "the optimizer `opt` is one expression" in ln, ln
    assert "use one GradScaler" in ln and "give each loss its own GradScaler" not in ln, ln


def test_loop_id_with_optimizers_by_the_same_index():
    ln = _line("loss_id_not_literal.unchanged.py")
    assert "`loss_id=k` is computed at run time" in ln, ln
    assert "give each loss its own GradScaler by hand" in ln, ln
