"""The web server's edge: every request passes here before Gradio sees any of it.

Gradio's own checks stop at its routes; what a hostile client or a hostile web page can do
before those routes run (or with the answers they give) is decided here:

- Host: only the names this instance is served under (a DNS-rebinding page sends its own
  name), Origin: only the page's own origin (no cross-site request, no CORS echo).
- Login: on an instance with a login, nothing but the login page and what it loads answers
  an anonymous client; wrong passwords from one client address earn a growing wait (429).
- Bodies: a Content-Length over the cap is refused before a byte is read; a chunked body
  is counted while it streams and cut at the cap. Uploads are capped in number and size.
- Answers: a 5xx carries a short text (never a traceback); a redirect never leaves the site;
  Gradio's proxy route and its file route given a URL answer 404.

The decisions are plain functions and small classes (unit-tested), one module per concern:
origin.py (Host, Origin, redirects), paths.py (what a request may reach, anonymously or at
all), backoff.py (the login back-off), quota.py (uploads, and the Refusal every check answers
with); `Guard` (asgi.py) is the ASGI wrapper that applies them. `Guard.lifespan` is handed to `launch(app_kwargs=...)`: Gradio's
FastAPI app runs it before uvicorn accepts a connection, and it wraps the app's whole
middleware stack, so the guard sits outside Gradio's CORS and error middlewares too.
"""
