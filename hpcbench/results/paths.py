"""Where a result file goes: a check before the run, a temporary name of the run's own, and a final
rename that never replaces a file another run put there meanwhile."""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hpcbench.errors import UsageError

try:
    import resource
except ImportError:  # pragma: no cover - not Unix
    resource = None  # type: ignore[assignment]


def run_id(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """Short and unique across runs started in the same second on different nodes: Slurm's job
    and step ids inside a job (plus a random part: one step may hold several runs), else random."""
    random = secrets.token_hex(3)
    job = environ.get("SLURM_JOB_ID")
    if job:
        return f"j{job}.{environ.get('SLURM_STEP_ID', 'b')}-{random}"
    return random


def check_target(path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse, before any training, an output the run could not or must not write.

    An existing file is kept unless ``overwrite``; ``overwrite`` replaces regular files only (never
    a directory, a device such as /dev/null, a pipe or a socket).
    """
    target = Path(path)
    if str(path).endswith(os.sep):
        raise UsageError(f"--out {str(path)!r} ends with {os.sep!r}: give the path of a result file (*.h5)")
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        if target.is_symlink():
            raise UsageError(f"--out {str(target)!r} is a symbolic link to a file that does not exist; give the "
                             "path of a result file (*.h5)") from None
        mode = None
    except NotADirectoryError:
        raise UsageError(f"--out {str(target)!r}: a part of the path is a file, not a directory") from None
    except OSError as exc:
        raise UsageError(f"--out {str(target)!r}: {exc.strerror or exc}") from None
    if mode is not None:
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise UsageError(f"--out {str(target)!r} is {kind}; give the path of a result file (*.h5)")
        if not overwrite:
            raise UsageError(f"--out {str(target)!r} already exists; choose another name or pass --overwrite "
                             "to replace it")
        if held(target):
            raise UsageError(f"--out {str(target)!r} belongs to a run that is still going (it holds "
                             f"{lock_name(target).name}): --overwrite replaces only a finished run's file; choose "
                             "another --out, or wait for that run to end")


def check_room(path: str | os.PathLike, needed: int) -> None:
    """Rank 0, before training: a file can be created where ``path`` goes, and the disk and this
    process's file-size limit leave room for ``needed`` bytes (the file and its next rewrite)."""
    target = Path(path)
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {str(target)!r}: cannot write in {str(parent)!r}: {exc.strerror or exc}") from None
    free = shutil.disk_usage(parent).free
    if free < 2 * needed:
        raise UsageError(f"--out {str(target)!r}: {mib(free)} free for a result file of about {mib(needed)} "
                         f"(and room for its rewrite: {mib(2 * needed)}); free space or choose another --out")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource is not None else -1
    if limit != getattr(resource, "RLIM_INFINITY", -1) and limit < needed:
        raise UsageError(f"--out {str(target)!r}: the file-size limit (ulimit -f) is {mib(limit)}, below the "
                         f"result file's expected {mib(needed)}")


def mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def make_dirs(*dirs: str | os.PathLike) -> None:
    """Make each directory and its parents; one that cannot be made (a read-only or full file system, a
    file in the way) is one line naming it and why."""
    for d in dirs:
        try:
            Path(d).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make {d}: {exc.strerror or exc}") from None


def check_study_dir(out_dir: str | os.PathLike, resume: bool) -> None:
    """A study writes into a fresh directory, or adds to one only when asked (``resume``)."""
    found = sorted(Path(out_dir).glob("*.h5"))
    if found and not resume:
        raise UsageError(f"--out-dir {str(out_dir)!r} already holds {len(found)} result file(s); pass --resume to "
                         "run only its points without an ok result, or choose another directory")


def partial_name(final: Path, rid: str) -> Path:
    """This run's temporary file beside the final one (no other run's clean-up can touch it)."""
    return final.with_name(f"{final.name}.{rid}.partial")


def sibling(final: Path, rid: str) -> Path:
    """Where a result goes when its name was taken while the run went on."""
    return final.with_name(f"{final.stem}-{rid}{final.suffix}")


def move_into_place(partial: Path, final: Path, overwrite: bool, rid: str) -> Path:
    """Give the complete ``partial`` file its name; → the name it got.

    Without ``overwrite`` nothing is ever replaced: a hard link claims the name atomically (or,
    where the filesystem has no hard links, an exclusive create does), and a name taken meanwhile
    sends the result to a sibling name. With ``overwrite`` only a regular file is replaced.
    """
    if overwrite:
        try:
            if not stat.S_ISREG(final.stat().st_mode):
                final = sibling(final, rid)
        except FileNotFoundError:
            pass
        os.replace(partial, final)
        return final
    for name in (final, sibling(final, rid)):
        if claim(partial, name):
            return name
    raise FileExistsError(errno.EEXIST, "both the result name and its sibling were taken", str(final))


def claim(partial: Path, name: Path) -> bool:
    """Move ``partial`` to ``name`` if nothing is there; False if something is."""
    try:
        os.link(partial, name)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            raise
        try:  # no hard links here: reserve the name exclusively, then move onto our own reservation
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        os.replace(partial, name)
        return True
    partial.unlink()
    return True


def lock_name(final: Path) -> Path:
    """The hidden file whose lock says a live run owns ``final``'s name."""
    return final.with_name(f".{final.name}.lock")


class NameHold:
    """A live run's hold on its result file's name: an exclusive lock on a hidden file beside it, which
    the kernel releases however the run ends (a killed run leaves an unlocked file, never a stale
    hold). ``--overwrite`` never replaces a held name (``check_target``), and a run never rewrites a
    file that is no longer the one it wrote (``identity``)."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.fd = -1

    def take(self) -> bool:
        """Hold the name; False if another live run holds it."""
        fd = os.open(lock_name(self.final), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # who holds it, for the line that says so
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd >= 0:
            try:
                os.unlink(lock_name(self.final))
            except OSError:  # gone, or its directory is (removed while the run went on)
                pass
            os.close(self.fd)
            self.fd = -1


def held(final: Path) -> bool:
    """Whether a live run holds ``final``'s name (see ``NameHold``)."""
    return holder(final) is not None


def holder(final: Path) -> int | None:
    """The process id of the live run that holds ``final``'s name (0 when it did not say), or None."""
    try:
        fd = os.open(lock_name(final), os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0
    finally:
        os.close(fd)  # closing drops a lock taken just now
    return None


def identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """Which file is at ``path`` (device, inode), or None when none is."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def utc_stamp() -> str:
    """Now, in UTC, as default file names carry it: ``20261127T013153``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
