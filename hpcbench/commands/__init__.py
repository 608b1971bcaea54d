"""The commands, one module each: ``add(sub)`` declares its flags, ``run(args)`` does it (importing what
it needs only then). ``COMMANDS`` is the order ``hpcbench --help`` lists them in."""
from __future__ import annotations

from types import ModuleType

from hpcbench.commands import (
                               calibrate,
                               check,
                               comm,
                               demo,
                               diff,
                               findings,
                               info,
                               report,
                               reproduce,
                               run,
                               simulate,
                               status,
                               sweep,
                               trace,
                               tune,
)
from hpcbench.commands import list as list_command

COMMANDS: tuple[ModuleType, ...] = (run, simulate, sweep, status, comm, calibrate, report, diff, check, trace,
                                    reproduce, findings, tune, list_command, info, demo)
