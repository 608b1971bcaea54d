"""Communication. ``hpcbench.comm.mpi`` (a run's transport), ``ulfm`` (its failures) and ``microbench``
(``hpcbench comm``'s measurements) import mpi4py; import them only when MPI really starts, so that
``report``, ``list`` and ``simulate`` work without MPI."""
