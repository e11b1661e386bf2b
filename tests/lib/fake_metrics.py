"""A local HTTP server standing in for pvgpud's /metrics, so that what
`pvgpuctl status` is given (any text, any bytes, an error status) is the
test's to choose."""
import http.server
import threading


class FakeMetrics:
    """Answers GET /metrics with body (str or bytes) and status code;
    any other path is 404.  A context manager: serving inside it."""

    def __init__(self, body, code=200):
        data = body.encode() if isinstance(body, str) else body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(code if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()
