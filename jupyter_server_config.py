"""Jupyter server configuration for this course: `make lab` serves the repository with it
(JUPYTER_CONFIG_PATH=<repo root>). A strict content-security policy on every page, so that nothing a student
wrote runs or loads in the instructor's browser, even in a notebook that formgrader renders
(autograder/outputs/jupyter_csp.py says what it allows and why)."""

c = get_config()  # noqa: F821 (provided by Jupyter when it loads this file)

try:
    from autograder.outputs.jupyter_csp import policy

    c.ServerApp.tornado_settings.update({"headers": {"Content-Security-Policy": policy()}})
    c.ServerApp.jpserver_extensions.update({"autograder.outputs.jupyter_csp": True})
except ImportError:  # Jupyter without this course's package: Jupyter's own policy
    pass
