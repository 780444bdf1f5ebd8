"""``setllm serve --replicas N``: N replicas of the server on Ray Serve behind one endpoint,
requests routed to the replica that already holds their documents (see docs/serving-ray.md).

Ray is an extra (``pip install -e '.[serve,ray]'`` in setllm's checkout). The modules that
import it (:mod:`.router`, :mod:`.deployments`, :mod:`.launch`) are imported only by
``--replicas``; :mod:`.options`, :mod:`.documents` and :mod:`.routing` need no Ray. Nothing the
ingress's process imports (:mod:`.ingress`, :mod:`.router` and what they read) imports torch:
it would cost that process seconds of CPU at every start (``tests/test_light_imports.py``).
"""
