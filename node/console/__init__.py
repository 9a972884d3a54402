"""The web console every node can serve (``[console]``, docs/console.md): a page and its
assets shipped in this package (``assets/``: plain HTML, CSS and JavaScript, nothing from
elsewhere), and a JSON API that calls the node's services with the logged-in user's
``Caller``, so the console is one more door behind the same users and ACLs.

- ``http.py``: the bounded HTTP/1.1 server on the node's loop;
- ``sessions.py``: signed session cookies and their CSRF tokens;
- ``server.py``: the door (host, origin, session and CSRF checks; routes);
- ``api.py``: the endpoints, each a service call.
"""
