"""The contract's two custom resources, as runtime ``Resource`` values (one definition each).

The only module of ``api`` that imports anything of ours: ``runtime.resources`` is a frozen
dataclass of five strings that imports nothing but the standard library.
"""

from computedomain.api import constants as c
from computedomain.runtime.resources import Resource

COMPUTE_DOMAINS = Resource(c.GROUP, c.VERSION, c.CD_PLURAL, c.CD_KIND, namespaced=True)
CLIQUES = Resource(c.GROUP, c.VERSION, c.CLIQUE_PLURAL, c.CLIQUE_KIND, namespaced=True)
