"""Chat with a trained run: LLaMA-Factory's API server per model, in a child process.

- `api_worker.py`: the server process (run by path; imports llamafactory; exits when the
  web process goes).
- `server.py`: start, watch, stream from and stop one server (127.0.0.1, one-time key).
- `stream.py`: pure readers of the server's answer stream and of its log while it loads.
- `view.py`: what the Chat tab shows, in the page's language.
- `cli.py`: `python app.py chat RUN_ID`.

The desk that holds the app's one chat session is backend/service/chat_desk.py.
"""
