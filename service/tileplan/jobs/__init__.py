"""Running solves off the request path: a local process pool (`tileplan serve`) or durable
procrastinate tasks on PostgreSQL (`tileplan worker`), both over the same layer runner."""
