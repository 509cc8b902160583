"""The course in a browser: JupyterLab in headless Chromium."""
