"""``hpcbench reproduce``: the published findings the suite was built to test, run as studies."""
