"""Communication. ``hpcbench.comm.mpi`` is the only module that imports mpi4py; import it only
when a run really starts, so that ``report``, ``list`` and ``simulate`` work without MPI."""
