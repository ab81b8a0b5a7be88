"""The HTTP endpoints, one module per resource; each is a thin door over store/, jobs/ and the core."""
