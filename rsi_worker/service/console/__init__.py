"""The web console: server-rendered pages (Jinja2 templates, inline SVG plots, one stylesheet shipped in
the package), no JavaScript library and nothing fetched from the internet (docs/service/console.md)."""
