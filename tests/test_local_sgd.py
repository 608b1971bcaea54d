"""local-sgd (periodic model averaging): the real worker programs against a naive reference, one
simulator run, one real MPI run."""
import contextlib
import io

import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.compressors import COMPRESSORS
from hpcbench.algorithms.decentral import EVALUATE, NO_MORE, model_frame
from hpcbench.algorithms.ops import Allreduce, Compute, Gradient, Op, Poll, Publish, Recv, Send
from hpcbench.bfloat16 import add_bf16
from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.results.store import read_run
from hpcbench.runtime import plan

from conftest import mpirun, ok, requires_mpi
from lockstep import lockstep
from reference import union_batch_sgd

N, SIZE, STEPS, LR = 4, 6, 11, 0.1
TARGETS = np.random.default_rng(7).normal(size=(N + 1, SIZE)).astype(np.float32)
CURVES = np.linspace(0.5, 2.0, N + 1).astype(np.float32)


def gradient(rank: int, x: np.ndarray) -> np.ndarray:
    """Worker ``rank``'s loss ½·c_r·‖x − t_r‖² + ¼‖x‖⁴/SIZE: its own minimum, a little nonlinear."""
    x64 = x.astype(np.float64)
    return (CURVES[rank] * (x64 - TARGETS[rank]) + x64 * (x64 @ x64) / SIZE).astype(np.float32)


def start() -> np.ndarray:
    return np.random.default_rng(3).normal(size=SIZE).astype(np.float32)


def program_models(algo: str, momentum: float, weight_decay: float = 0.0, **options) -> dict[int, np.ndarray]:
    """Drive the n real worker programs in lockstep, as rank 0 asking every worker for a snapshot after
    every step; → {step: models[worker]} for the steps after which every worker kept (or published) its
    model. A bucketed compute is a collective: it returns the summed gradient."""
    cfg = RunConfig(algo=algo, steps=STEPS, lr=LR, momentum=momentum, warmup_epochs=0.0, weight_decay=weight_decay,
                    options={algo: options} if options else {})
    cls = ALGORITHMS.get(algo)
    algorithm = cls(plan.make_context(plan.validate(cfg), N, start(), train_size=10**6))
    models: dict[int, dict[int, np.ndarray]] = {r: {} for r in range(1, N + 1)}
    frame = model_frame(SIZE)

    def answer(rank: int, op: Op) -> object:
        if isinstance(op, Compute):
            return Gradient(gradient(rank, op.params), 0.0, 1, 0)
        if isinstance(op, Publish):  # its "model" window, or a snapshot it keeps
            models[rank][frame.integer(op.data, "updates")] = frame.view(op.data, "z").copy()
        elif isinstance(op, Poll):  # rank 0 asks for a snapshot after every step
            return [(0, EVALUATE.pack(k=0))]
        elif isinstance(op, Recv):  # done: rank 0 says nothing more is coming
            return (0, EVALUATE.pack(k=NO_MORE))
        else:
            assert isinstance(op, Send)  # progress reports to rank 0
        return None

    def joins(op: Op) -> bool:
        return isinstance(op, Allreduce) or (isinstance(op, Compute) and bool(op.buckets))

    def complete(joined: dict[int, Op]) -> dict[int, object]:
        parts = {r: gradient(r, op.params) if isinstance(op, Compute) else op.data for r, op in joined.items()}
        ordered = [parts[r] for r in sorted(parts)]
        if any(isinstance(op, Allreduce) and op.bf16 for op in joined.values()):  # bfloat16 bit patterns
            total = ordered[0]
            for part in ordered[1:]:
                total = add_bf16(total, part)
        else:  # in the parts' own type (float16 sums in float16)
            total = np.sum(ordered, axis=0, dtype=ordered[0].dtype)
        return {r: Gradient(total, 0.0, 1, 0) if isinstance(op, Compute) else total.copy()
                for r, op in joined.items()}

    lockstep({r: algorithm.worker(r) for r in range(1, N + 1)}, answer, joins, complete)
    steps = set.intersection(*(set(m) for m in models.values()))
    return {s: np.array([models[r][s] for r in range(1, N + 1)]) for s in sorted(steps)}


def naive_local_sgd(period: int, momentum: float) -> np.ndarray:
    """Written out: each worker x_i ← x_i − lr·(m·b_i + g_i(x_i)); every ``period`` steps and at the end
    all x_i ← mean x_j. → models[step, worker]."""
    x = np.tile(start().astype(np.float64), (N, 1))
    buf = np.zeros_like(x)
    out = []
    for step in range(STEPS):
        for i in range(N):
            buf[i] = momentum * buf[i] + gradient(i + 1, x[i].astype(np.float32)) if momentum else \
                gradient(i + 1, x[i].astype(np.float32))
            x[i] -= LR * buf[i]
        if (step + 1) % period == 0 or step + 1 == STEPS:
            x[:] = x.mean(axis=0)
        out.append(x.copy())
    return np.array(out)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_period_one_is_allreduce_step_for_step(momentum):
    local = program_models("local-sgd", momentum, period=1)
    sync = program_models("allreduce", momentum)
    assert sorted(local) == list(range(1, STEPS + 1)) and sorted(sync) == list(range(1, STEPS + 1))
    for step, models in sync.items():
        np.testing.assert_allclose(local[step], models, rtol=2e-6, atol=2e-6)
    assert all((m == m[:1]).all() for m in local.values())  # identical replicas after every average


@pytest.mark.parametrize("period, momentum", [(3, 0.0), (4, 0.9), (STEPS + 5, 0.0)])
def test_periodic_averaging_matches_the_naive_reference(period, momentum):
    published = program_models("local-sgd", momentum, period=period)
    assert sorted(published) == list(range(1, STEPS + 1))
    models = np.array([published[s] for s in sorted(published)])
    np.testing.assert_allclose(models, naive_local_sgd(period, momentum), rtol=1e-5, atol=1e-5)
    between = [s for s in range(STEPS - 1) if (s + 1) % period]
    assert between and all(np.ptp(models[s], axis=0).max() > 1e-4 for s in between)  # replicas drift apart
    np.testing.assert_array_equal(models[-1], np.broadcast_to(models[-1][0], models[-1].shape))


def naive_outer(period: int, momentum: float, outer: str, outer_lr: float, mu: float) -> np.ndarray:
    """Written out: the local steps as above; at the end of each round Δ = mean_i(θ − x_i), then
    m ← μ·m + Δ and θ ← θ − lr·(Δ + μ·m) (nesterov) or θ ← θ − lr·m (sgd), and every x_i ← θ."""
    x = np.tile(start().astype(np.float64), (N, 1))
    theta, m, buf = start().astype(np.float64), np.zeros(SIZE), np.zeros_like(x)
    out = []
    for step in range(STEPS):
        for i in range(N):
            g = gradient(i + 1, x[i].astype(np.float32))
            buf[i] = momentum * buf[i] + g if momentum else g
            x[i] -= LR * buf[i]
        if (step + 1) % period == 0 or step + 1 == STEPS:
            delta = (theta - x).mean(axis=0)
            m = mu * m + delta
            theta = theta - outer_lr * (delta + mu * m if outer == "nesterov" else m)
            x[:] = theta
        out.append(x.copy())
    return np.array(out)


@pytest.mark.parametrize("period, momentum, outer, outer_lr, mu", [
    (3, 0.0, "nesterov", 0.7, 0.9),  # DiLoCo's outer step
    (4, 0.9, "sgd", 0.5, 0.6),  # SlowMo's heavy-ball, inner momentum kept across rounds
    (2, 0.0, "sgd", 1.3, 0.0),  # an extrapolating outer step without momentum
    (STEPS + 5, 0.9, "nesterov", 0.7, 0.9),  # one round, at the end
])
def test_an_outer_optimizer_matches_the_naive_reference(period, momentum, outer, outer_lr, mu):
    published = program_models("local-sgd", momentum, period=period, outer=outer, outer_lr=outer_lr,
                               outer_momentum=mu)
    models = np.array([published[s] for s in sorted(published)])
    want = naive_outer(period, momentum, outer, outer_lr, mu)
    np.testing.assert_allclose(models, want, rtol=2e-5, atol=2e-5)
    assert not np.allclose(want, naive_local_sgd(period, momentum), atol=1e-3)  # the outer step shows


def torch_adamw_diloco(period: int, weight_decay: float, outer_lr: float, mu: float) -> np.ndarray:
    """An independent reference: torch.optim.AdamW as each worker's inner optimizer (its state kept across
    rounds), torch.optim.SGD with Nesterov momentum as the outer step on Δ = mean_i(θ − x_i)."""
    import torch

    theta = torch.tensor(start(), dtype=torch.float32, requires_grad=True)
    outer = torch.optim.SGD([theta], lr=outer_lr, momentum=mu, nesterov=True)
    xs = [torch.tensor(start(), dtype=torch.float32, requires_grad=True) for _ in range(N)]
    inner = [torch.optim.AdamW([x], lr=LR, weight_decay=weight_decay) for x in xs]
    out = []
    for step in range(STEPS):
        for i, (x, opt) in enumerate(zip(xs, inner)):
            x.grad = torch.from_numpy(gradient(i + 1, x.detach().numpy()))
            opt.step()
        if (step + 1) % period == 0 or step + 1 == STEPS:
            with torch.no_grad():
                theta.grad = torch.stack([theta - x for x in xs]).mean(dim=0)
            outer.step()
            with torch.no_grad():
                for x in xs:
                    x.copy_(theta)
        out.append(np.array([x.detach().numpy().copy() for x in xs]))
    return np.array(out)


@pytest.mark.parametrize("period, weight_decay", [(3, 0.0), (4, 0.1), (STEPS + 5, 0.01)])
def test_adamw_as_the_inner_optimizer_matches_torchs_adamw_under_diloco(period, weight_decay):
    published = program_models("local-sgd", 0.0, weight_decay=weight_decay, period=period, outer="nesterov",
                               outer_lr=0.7, outer_momentum=0.9, inner="adamw")
    models = np.array([published[s] for s in sorted(published)])
    want = torch_adamw_diloco(period, weight_decay, 0.7, 0.9)
    np.testing.assert_allclose(models, want, rtol=2e-5, atol=2e-5)
    sgd = np.array([m for _, m in sorted(program_models("local-sgd", 0.0, weight_decay=weight_decay, period=period,
                                                             outer="nesterov", outer_lr=0.7,
                                                             outer_momentum=0.9).items())])
    assert not np.allclose(models, sgd, atol=1e-3)  # AdamW's steps are not SGD's


def torch_adamw_allreduce(weight_decay: float) -> np.ndarray:
    """An independent reference for DiLoCo's baseline: one model, torch.optim.AdamW on the workers' mean
    gradient every step. → models[step]."""
    import torch

    theta = torch.tensor(start(), dtype=torch.float32, requires_grad=True)
    opt = torch.optim.AdamW([theta], lr=LR, weight_decay=weight_decay)
    out = []
    for _ in range(STEPS):
        x = theta.detach().numpy()
        theta.grad = torch.from_numpy(np.mean([gradient(r, x) for r in range(1, N + 1)], axis=0, dtype=np.float32))
        opt.step()
        out.append(theta.detach().numpy().copy())
    return np.array(out)


@pytest.mark.parametrize("weight_decay, overlap, momentum", [(0.0, True, 0.0), (0.1, True, 0.9), (0.1, False, 0.0)])
def test_allreduce_with_adamw_is_torchs_adamw_on_the_mean_gradient(weight_decay, overlap, momentum):
    """The run's momentum (the studies set 0.9) is SGD's: AdamW's moments replace it."""
    published = program_models("allreduce", momentum, weight_decay=weight_decay, optimizer="adamw", overlap=overlap)
    models = np.array([published[s] for s in sorted(published)])
    want = torch_adamw_allreduce(weight_decay)
    assert models.shape == (STEPS, N, SIZE)
    np.testing.assert_allclose(models, np.repeat(want[:, None, :], N, axis=1), rtol=2e-5, atol=2e-5)
    sgd = np.array([m for _, m in sorted(program_models("allreduce", 0.0, weight_decay=weight_decay).items())])
    assert not np.allclose(models, sgd, atol=1e-3)  # AdamW's steps are not SGD's


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_outer_sgd_at_rate_one_without_momentum_is_plain_averaging_step_for_step(momentum):
    outer = program_models("local-sgd", momentum, period=3, outer="sgd", outer_lr=1.0, outer_momentum=0.0)
    plain = program_models("local-sgd", momentum, period=3)
    assert sorted(outer) == sorted(plain) == list(range(1, STEPS + 1))
    for step in plain:  # θ − mean(θ − x_i) is mean(x_i) up to float32 rounding
        np.testing.assert_allclose(outer[step], plain[step], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("compress, tolerance", [("powersgd", 1e-6), ("fp16", 1e-2), ("bf16", 5e-2)])
def test_a_compressed_average_of_the_models_differences_is_plain_averaging_within_its_precision(compress, tolerance):
    """outer = none with compression averages Δ = θ − x_i, never the models: θ − mean(Δ) is the plain
    average, to the compression's precision (PowerSGD sends a vector as it is: exact)."""
    compressed = program_models("local-sgd", 0.0, period=3, compress=compress, powersgd_start=0)
    plain = program_models("local-sgd", 0.0, period=3)
    for step in plain:
        np.testing.assert_allclose(compressed[step], plain[step], rtol=tolerance, atol=tolerance)
    if compress != "powersgd":  # rounded to 16 bits: well beyond float32's rounding
        assert np.abs(compressed[STEPS] - plain[STEPS]).max() > 1e-5


@pytest.mark.parametrize("outer, lr, mu", [("nesterov", 0.7, 0.9), ("sgd", 1.0, 0.5)])
def test_an_outer_optimizer_without_rate_or_momentum_takes_its_papers(outer, lr, mu):
    given = program_models("local-sgd", 0.0, period=3, outer=outer)
    np.testing.assert_allclose(np.array([given[s] for s in sorted(given)]), naive_outer(3, 0.0, outer, lr, mu),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("options, line", [
    ({"outer": "adam"}, "unknown local-sgd.outer 'adam'; valid: none, sgd, nesterov"),
    ({"compress": "int8"}, f"unknown local-sgd.compress 'int8'; valid: {', '.join(COMPRESSORS.names())}"),
    ({"outer_momentum": 1.0}, "local-sgd.outer_momentum must be in [0, 1) (-1: 0.9 for nesterov, 0.5 for sgd "
                              "(SlowMo)), got 1.0"),
    ({"outer_lr": -0.5}, "local-sgd.outer_lr must be > 0 (0: 0.7 for nesterov (DiLoCo), else 1), got -0.5"),
    ({"powersgd_rank": 0}, "local-sgd.powersgd_rank must be >= 1 columns, got 0"),
])
def test_outer_and_compression_options_are_checked_in_one_line(options, line):
    cfg = RunConfig(algo="local-sgd", options={"local-sgd": options})
    with pytest.raises(UsageError) as refused:
        validated = plan.validate(cfg)
        validated.algo.check(cfg, validated.options, 4)
    assert str(refused.value) == line


def test_a_period_below_one_is_refused_in_one_line():
    cfg = RunConfig(algo="local-sgd", options={"local-sgd": {"period": 0}})
    with pytest.raises(UsageError, match=r"local-sgd.period must be >= 1 local steps, got 0"):
        ALGORITHMS.get("local-sgd").check(cfg, plan.validate(cfg).options, 4)


def simulate(tmp_path, name: str, *args: str):
    out = tmp_path / f"{name}.h5"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["simulate", "--workers", "4", "--steps", "12", "--batch-size", "16", "--lr", "0.05",
                     "--set", "warmup_epochs=0", *args, "--out", str(out)]) == 0
    return read_run(out)


def test_simulated_local_sgd_ends_in_consensus_and_period_one_tracks_allreduce(tmp_path):
    local = simulate(tmp_path, "local4", "--algo", "local-sgd", "--set", "local-sgd.period=4")
    assert local.attrs["config"]["options"]["local-sgd"]["period"] == 4
    assert local.evals["consensus"][-1] == 0.0 and local.evals["samples"][-1] == 12 * 4 * 16
    period1 = simulate(tmp_path, "local1", "--algo", "local-sgd", "--set", "local-sgd.period=1")
    sync = simulate(tmp_path, "allreduce", "--algo", "allreduce")
    np.testing.assert_allclose(period1.final_params, sync.final_params, rtol=1e-4, atol=1e-5)
    assert not np.allclose(local.final_params, sync.final_params, rtol=1e-4, atol=1e-5)
    assert local.attrs["config"]["resolved_options"] == {"outer_lr": 1.0, "outer_momentum": 0.0}
    diloco = simulate(tmp_path, "diloco", "--algo", "local-sgd", "--set", "local-sgd.outer=nesterov")
    assert diloco.attrs["config"]["resolved_options"] == {"outer_lr": 0.7, "outer_momentum": 0.9}
    rows, code = local.timeline, list(local.ops).index("Allreduce")
    for rank in range(1, 5):  # 12 steps, an average every 4
        assert ((rows["rank"] == rank) & (rows["op"] == code)).sum() == 3


@requires_mpi
@pytest.mark.timeout(300)
def test_real_mpi_run_with_period_one_equals_union_batch_sgd(tmp_path):
    out = tmp_path / "local.h5"
    ok(mpirun(4, "run", "--algo", "local-sgd", "--set", "local-sgd.period=1", "--dataset", "digits", "--model",
              "mlp", "--batch-size", "16", "--steps", "12", "--lr", "0.05", "--set", "warmup_epochs=0",
              "--set", "evals=4", "--out", str(out)))
    rec = read_run(out)
    expected = union_batch_sgd("mlp", "digits", 3, steps=12, batch=16, lr=0.05, momentum=0.0, wd=0.0, seed=0)
    np.testing.assert_allclose(rec.final_params, expected, rtol=1e-4, atol=2e-5)
    assert rec.evals["consensus"][-1] == 0.0
    assert (rec.tables["final_models"]["samples"] == 12 * 16).all()
