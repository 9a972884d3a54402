"""Door-neutral application services: one place per job for every rule of that job.

A node has three client doors: RocketMQ 5's gRPC MessagingService, ferrymq's own Admin and
Data services on the same gRPC port (``node/grpc/``), and RocketMQ 4.x's remoting port
(``node/remoting/``). A door only translates: frames or protobuf messages into a plain
request (the caller, names already normalized: namespaces qualified, V2 short header keys
read once), and the service's plain result back into its answer. Everything a job decides
is decided here, once, on that one normalized request, in one fixed order
(docs/architecture.md, "Services and doors"):

1. who may: the ACL decision on the request's own names (``permissions.py``), or for a
   request that names a record, on the topic the node reads from the record itself;
2. the node's role (a write needs the master);
3. the resources: the topic exists and allows the direction (read or write), a consumer
   group exists or is created on first use (only the group step 1 allowed);
4. the request's bounds (batch sizes, bytes), then each message's rules (body, reserved
   property names, type against the topic's);
5. the queue (one ``Admission`` for every door, so one round-robin position per topic);
6. the work (the store, the states derived from it) and its metrics.

A service never imports a door, a door never imports another door
(``tests/architecture/test_doors_and_services.py``).
"""
