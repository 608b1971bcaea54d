"""Communication. ``hpcbench.comm.mpi`` (a run's transport, with its parts ``windows``, ``channels``,
``health``, ``gathering`` and ``polling``), ``ulfm`` (its failures) and ``microbench`` (``hpcbench comm``'s
measurements) start MPI through ``mpilib``; import them only when MPI really starts, so that
``report``, ``list`` and ``simulate`` work without MPI (``probe`` asks which library without starting it)."""
