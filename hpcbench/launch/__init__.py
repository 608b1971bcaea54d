"""Starting runs from Python: ``mpiexec`` here or across the emulated cluster, and the local studies
(demo, ``sweep --local``)."""
