"""Datasets, shards, models and the flat-parameter trainer."""
import os
import pickle
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from hpcbench.errors import UsageError
from hpcbench.results.store import read_run
from hpcbench.workload.datasets import CIFAR_FILES, DATASETS, load_dataset
from hpcbench.workload.models import MODELS
from hpcbench.workload.networks import NETWORKS, build_model
from hpcbench.workload.payload import Payload, PayloadOptions
from hpcbench.workload.shapes import Sized
from hpcbench.workload.sharding import BatchStream, shard_indices
from hpcbench.workload.trainer import Trainer

from conftest import cli


def write_tiny_cifar(root, per_batch=20):
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for name in CIFAR_FILES:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=per_batch)]
        with open(root / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels}, fh)
    return root


def test_digits_is_the_real_dataset_split_disjointly():
    d = load_dataset("digits")
    assert d.x_train.shape == (1437, 1, 8, 8) and d.x_test.shape == (360, 1, 8, 8)
    assert set(np.unique(d.y_train)) == set(range(10))
    assert d.x_train.max() == 16.0
    rows = {r.tobytes() for r in d.x_train}
    # digits has a few duplicate images; the split must not duplicate samples beyond those.
    assert len(rows) > 1400


def test_synthetic_is_deterministic_and_learnable_shape():
    a, b = load_dataset("synthetic"), load_dataset("synthetic")
    assert np.array_equal(a.x_train, b.x_train) and a.input_shape == (3, 32, 32)


def test_cifar_reads_the_python_pickle_format(tmp_path):
    d = load_dataset("cifar10", str(write_tiny_cifar(tmp_path / "c")))
    assert d.x_train.shape == (100, 3, 32, 32) and d.x_train.dtype == np.uint8 and len(d.y_test) == 20
    x = d.normalise(d.x_train[:4])
    assert x.dtype == np.float32 and abs(float(x.mean())) < 1.0


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_batches_as_python_and_numpy_pickle_them_are_read(tmp_path, protocol):
    root = write_tiny_cifar(tmp_path / "c")
    rng = np.random.default_rng(1)
    batch = {b"batch_label": b"training batch 1 of 5", b"labels": [3] * 20, b"filenames": [b"x.png"] * 20,
             b"data": rng.integers(0, 256, size=(20, 3072), dtype=np.uint8)}
    (root / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=protocol))
    assert np.array_equal(load_dataset("cifar10", str(root)).x_train[:20].reshape(20, -1), batch[b"data"])


class Crafted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_cifar_pickle_is_refused_without_running_anything(tmp_path):
    root = write_tiny_cifar(tmp_path / "c")
    marker = tmp_path / "PWNED"
    (root / "test_batch").write_bytes(pickle.dumps({b"data": Crafted(marker), b"labels": [0]}))
    with pytest.raises(UsageError,
                       match=r"test_batch is refused: it asks for (posix|os)\.system, and a CIFAR-10 batch"):
        load_dataset("cifar10", str(root))
    assert not marker.exists()


def test_cifar_missing_dir_names_what_is_expected(tmp_path):
    with pytest.raises(UsageError, match="needs --data-dir"):
        load_dataset("cifar10", "")
    with pytest.raises(UsageError, match=r"lacks data_batch_1, .*test_batch \(expected the python version"):
        load_dataset("cifar10", str(tmp_path))


def test_shards_are_disjoint_and_cover_the_data():
    shards = [shard_indices(103, 4, i, seed=7) for i in range(4)]
    joined = np.concatenate(shards)
    assert len(joined) == 103 and len(set(joined.tolist())) == 103


def test_batch_stream_counts_exactly_and_reshuffles_each_pass():
    shard = np.arange(10)
    s = BatchStream(shard, 4, seed=1, index=0)
    batches = [s.next() for _ in range(5)]  # 20 samples = exactly two passes
    first, second = np.concatenate(batches)[:10], np.concatenate(batches)[10:]
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(10))
    assert not np.array_equal(first, second)
    again = BatchStream(shard, 4, seed=1, index=0)
    assert all(np.array_equal(b, again.next()) for b in batches)


TRAINED = [name for name, model in MODELS.items() if model.trains]  # payload: messages only, no network
INPUTS = ((1, 8, 8), (1, 28, 28), (3, 32, 32))  # digits and teacher; fashion-mnist; synthetic and cifar10


def test_every_network_is_a_model_that_trains_and_every_model_that_trains_has_one():
    assert NETWORKS.names() == [name for name, model in MODELS.items() if model.network is not None]
    assert all(MODELS.get(name).network is NETWORKS.get(name) for name in NETWORKS.names()) and NETWORKS.names()


@pytest.mark.parametrize("name", TRAINED)
def test_models_build_for_every_input_shape(name):
    for shape in INPUTS:
        model = build_model(name, shape, 10, seed=0)
        assert model(torch.zeros(2, *shape)).shape == (2, 10)


@pytest.mark.parametrize("name", TRAINED)
def test_a_sized_network_has_the_built_networks_shapes_in_its_order(name):
    """What a timing-only simulation charges on the wire (its size) and buckets by (its bounds)."""
    shapes = NETWORKS.get(name).shapes
    digits = load_dataset("digits")
    for shape in INPUTS:
        for classes in (10, 7):
            data = replace(digits, x_train=np.zeros((1, *shape), np.float32), classes=classes)
            built = [tuple(p.shape) for p in build_model(name, shape, classes, seed=0).parameters()]
            sized = Sized(shapes, data)
            assert list(sized.shapes) == built
            assert sized.size == sum(int(np.prod(s)) for s in built)
    assert Sized(shapes, digits).bounds == Trainer(name, digits, seed=0).bounds


def test_same_seed_same_initial_parameters():
    a = Trainer("cnn", load_dataset("digits"), seed=3)
    b = Trainer("cnn", load_dataset("digits"), seed=3)
    c = Trainer("cnn", load_dataset("digits"), seed=4)
    assert np.array_equal(a.initial, b.initial) and not np.array_equal(a.initial, c.initial)


def test_a_trainer_no_one_holds_is_freed_with_its_data():
    """A process that simulates run after run (``reproduce --jobs``' workers, ``tune`` in one process) must
    not keep each run's model and data set: the gradient hooks torch holds on the parameters referred back
    to the trainer, a cycle the collector cannot see through, and a worker grew 27 MB a Fashion-MNIST run."""
    import gc
    import weakref

    data = load_dataset("digits")
    trainer = Trainer("cnn", replace(data, x_train=data.x_train.copy()), seed=0)
    x, y = trainer.batch(np.arange(8))
    trainer.gradient(trainer.initial, x, y, buckets=((0, trainer.bounds[2]), (trainer.bounds[2], trainer.size)),
                     ready=lambda k, v: None)  # the hooks have run
    gone, images = weakref.ref(trainer), weakref.ref(trainer.data)
    del trainer
    gc.collect()
    assert gone() is None and images() is None


def test_flat_gradient_matches_autograd_on_a_fresh_model():
    data = load_dataset("digits")
    trainer = Trainer("mlp", data, seed=0)
    # Several gradients in a row, an evaluation between two: each is of its own parameters and batch
    # alone (nothing left over from the one before, training mode back after evaluating).
    for k, idx in enumerate((np.arange(16), np.arange(16, 40), np.arange(40, 48))):
        params = trainer.initial + np.float32(0.01 * (k + 1))
        if k == 2:
            trainer.evaluate(params, 50, 50)
        grad, loss, correct = trainer.gradient(params, *trainer.batch(idx))
        ref = build_model("mlp", data.input_shape, 10, seed=0)
        torch.nn.utils.vector_to_parameters(torch.from_numpy(params), ref.parameters())
        x = torch.from_numpy(data.normalise(data.x_train[idx]))
        out = torch.nn.functional.cross_entropy(ref(x), torch.from_numpy(data.y_train[idx]))
        out.backward()
        expected = torch.nn.utils.parameters_to_vector([p.grad for p in ref.parameters()]).numpy()
        np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)
        assert loss == pytest.approx(float(out.detach()), rel=1e-6)
        assert grad.dtype == np.float32 and grad.shape == (trainer.size,)
        assert correct == int((ref(x).argmax(1) == torch.from_numpy(data.y_train[idx])).sum())


def test_a_gradient_after_an_evaluation_is_taken_in_training_mode():
    data = load_dataset("synthetic")
    trainer = Trainer("resnet20", data, seed=0)  # BatchNorm: its statistics differ between the modes
    idx = np.arange(8)
    trainer.evaluate(trainer.initial, 16, 16)
    grad, _, _ = trainer.gradient(trainer.initial, *trainer.batch(idx))
    ref = build_model("resnet20", data.input_shape, data.classes, seed=0)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(trainer.initial), ref.parameters())
    x = torch.from_numpy(data.normalise(data.x_train[idx]))
    torch.nn.functional.cross_entropy(ref.train()(x), torch.from_numpy(data.y_train[idx])).backward()
    expected = torch.nn.utils.parameters_to_vector([p.grad for p in ref.parameters()]).numpy()
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_a_gradient_handed_back_is_not_changed_by_the_next():
    data = load_dataset("digits")
    trainer = Trainer("cnn", data, seed=0)
    first, _, _ = trainer.gradient(trainer.initial, *trainer.batch(np.arange(32)))
    kept = first.copy()
    trainer.gradient(trainer.initial + np.float32(0.1), *trainer.batch(np.arange(32, 64)))
    np.testing.assert_array_equal(first, kept)


@pytest.mark.parametrize("model", ["cnn", "payload"])
def test_a_gradient_asked_into_a_buffer_is_written_there_and_is_the_same_gradient(model):
    data = load_dataset("digits")
    workload = (Trainer(model, data, seed=0) if model != "payload"
                else Payload(PayloadOptions(params=1000), data, workers=1, seed=0))
    batch = workload.batch(np.arange(32))
    fresh, loss, correct = workload.gradient(workload.initial, *batch)
    message = np.full(workload.size + 3, np.nan, np.float32)  # the gradient a field of a larger buffer
    into, loss_into, correct_into = workload.gradient(workload.initial, *batch, out=message[2:-1])
    assert np.shares_memory(into, message) and into.shape == fresh.shape
    np.testing.assert_array_equal(message[2:-1], fresh)
    assert np.isnan(message[:2]).all() and np.isnan(message[-1])  # nothing written around it
    np.testing.assert_array_equal([loss_into, correct_into], [loss, correct])  # (NaN loss: the payload's)


def test_evaluate_reports_loss_and_accuracy_and_recalibrates_batchnorm(tmp_path):
    data = load_dataset("cifar10", str(write_tiny_cifar(tmp_path / "c")))
    trainer = Trainer("resnet20", data, seed=0)
    loss, acc, val_loss, val_acc = trainer.evaluate(trainer.initial, 20, 20)
    assert np.isfinite(loss) and 0.0 <= acc <= 1.0
    assert np.isnan(val_loss) and np.isnan(val_acc)  # no validation split was held out
    bn = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert int(bn.num_batches_tracked) > 0  # statistics were rebuilt for these parameters


def test_models_built_at_once_by_threads_get_their_own_seeds_parameters():
    """Ranks of the loopback cluster are threads: torch's one global generator must not mix their seeds."""
    import threading

    def flat(model):
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    expected = {seed: flat(build_model("cnn", (1, 8, 8), 10, seed)) for seed in (0, 1)}
    built: dict[int, list] = {0: [], 1: []}

    def build(seed: int) -> None:
        for _ in range(5):
            built[seed].append(flat(build_model("cnn", (1, 8, 8), 10, seed)))

    threads = [threading.Thread(target=build, args=(seed,)) for seed in (0, 1, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(torch.equal(p, expected[seed]) for seed in (0, 1) for p in built[seed])


@pytest.mark.parametrize("model, size", [("cnn-small", 34_538), ("cnn-tiny", 14_074)])
def test_the_small_cnns_take_a_step_on_cifar_files_and_a_simulation_runs_them(tmp_path, model, size):
    """cnn-small and cnn-tiny (the studies'), made for Fashion-MNIST's 1x28x28, run on CIFAR-10's 3x32x32 read
    from --data-dir: a user with the data runs the studies' model on it. Sizes by hand: conv(c, c1, 5) +
    conv(c1, c2, 5) + linear(c2·8·8, 10), with (c1, c2) = (16, 32) and (8, 16)."""
    root = write_tiny_cifar(tmp_path / "c")
    trainer = Trainer(model, load_dataset("cifar10", str(root)), seed=0)
    x, y = trainer.batch(np.arange(16))
    params, losses = trainer.initial.copy(), []
    for _ in range(10):  # steps on the same batch: its loss falls
        grad, loss, _ = trainer.gradient(params, x, y)
        assert np.isfinite(grad).all() and np.abs(grad).sum() > 0
        params -= np.float32(0.05) * grad
        losses.append(loss)
    assert trainer.size == size and losses[-1] < losses[0]
    out = tmp_path / "sim.h5"
    code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "2", "--model", model, "--dataset",
                       "cifar10", "--data-dir", str(root), "--steps", "2", "--batch-size", "8", "--out", str(out))
    assert code == 0, err
    run = read_run(out)
    assert run.attrs["status"] == "ok" and np.isfinite(run.summary["final_loss"])


def test_the_readme_and_list_name_every_model_and_dataset_as_the_registries_do():
    """The README's options table (``--model a|b``, ``--dataset a|b``, in registration order) and ``hpcbench
    list``'s tables follow the registries: a model or dataset registered makes stale text fail here."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    _, listed, _ = cli("list")
    for flag, registry, title in (("model", MODELS, "Models"), ("dataset", DATASETS, "Datasets")):
        row = re.search(rf"^\| `--{flag} ([a-z0-9\\|-]+)` \|", readme, re.M)
        assert row is not None and row.group(1).split("\\|") == registry.names(), (flag, row)
        table = listed.split(f"\n\n{title}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
        assert sorted(line.split()[0] for line in table) == sorted(registry.names())


@pytest.mark.fast
def test_evaluations_on_the_channels_last_copy_score_what_the_model_itself_scores():
    """A convolutional network without BatchNorm is scored on a channels-last copy of the parameters given:
    the same accuracy as the training model at those parameters, the loss to float rounding; a network
    with BatchNorm keeps its own model (its statistics are rebuilt in it)."""
    data = load_dataset("synthetic", val_fraction=0.2)
    trainer = Trainer("cnn-tiny", data, seed=0)
    assert trainer.scorer is not None and Trainer("resnet20", data, seed=0).scorer is None
    rng = np.random.default_rng(1)
    for scale in (0.0, 0.05, 0.5):
        params = trainer.initial + (scale * rng.standard_normal(trainer.size)).astype(np.float32)
        copy = trainer.evaluate(params, 10**9, 10**9)
        scorer, trainer.scorer = trainer.scorer, None
        own = trainer.evaluate(params, 10**9, 10**9)
        trainer.scorer = scorer
        assert copy[1] == own[1] and copy[3] == own[3]
        np.testing.assert_allclose(copy[::2], own[::2], rtol=1e-5)
    assert all(p.is_contiguous() for p in trainer.model.parameters())  # training keeps its flat views


@pytest.mark.fast
@pytest.mark.parametrize("model", ["cnn-tiny", "cnn-small", "cnn"])
def test_every_layer_of_the_channels_last_scorer_gets_channels_last_images(model):
    """A convolution of a one-channel image (digits, Fashion-MNIST) gives its output in the contiguous layout
    (torch cannot tell the two layouts of one channel apart), and pooling it there took as long as the
    convolutions: the scorer keeps every image between its layers channels-last, and scores what the model
    itself scores."""
    data = load_dataset("digits", val_fraction=0.2)
    trainer = Trainer(model, data, seed=0)
    assert trainer.scorer is not None
    seen = []
    for layer in trainer.scorer.modules():
        if not list(layer.children()):
            layer.register_forward_pre_hook(lambda mod, args: seen.append(
                (type(mod).__name__, args[0].dim() < 4 or args[0].is_contiguous(memory_format=torch.channels_last))))
    copy = trainer.evaluate(trainer.initial, 10**9, 10**9)
    assert seen and all(ok for _, ok in seen), seen
    trainer.scorer = None
    assert trainer.evaluate(trainer.initial, 10**9, 10**9)[1::2] == copy[1::2]
