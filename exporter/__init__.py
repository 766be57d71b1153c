"""gangscope: per-job, per-topology-domain observability for Kubernetes GPU training clusters."""

__version__ = "0.1.0"

# How to get the simulators (the gangscope-sim distribution, exporter/sim/pyproject.toml), which
# the runtime wheel and image leave out; every message that asks for them says this. Neither
# distribution is on a package index: both install from a checkout or from the wheels it builds.
SIMULATORS_INSTALL = (
    "from a checkout, pip install . ./exporter/sim (scripts/demo does it for you); from wheels, "
    "pip wheel --no-deps -w dist . ./exporter/sim in a checkout builds "
    f"dist/gangscope-{__version__}-py3-none-any.whl and dist/gangscope_sim-{__version__}-py3-none-any.whl, "
    "and pip install dist/*.whl installs both"
)
