"""The HTTP integration the ASGI and WSGI middlewares share: identity, headers, policies,
the request reader and the middleware base."""
