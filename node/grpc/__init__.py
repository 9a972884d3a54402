"""The gRPC doors on the client port: RocketMQ 5's MessagingService (``messaging.py``),
ferrymq's Admin (``admin.py``) and Data (``data.py``). They translate protobuf requests
into the services' plain requests (``node/services/``) and results back into answers;
every rule of a job is the service's. Around every method, wrapped once at registration
(``method_wrapping.py``): malformed requests, forwarding to the master, namespaces,
timing, authentication."""
