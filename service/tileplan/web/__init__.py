"""The browser view and the offline API docs: Jinja2 templates, server-drawn SVG charts, static assets."""
