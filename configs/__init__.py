"""corpusforge.presets: the presets shipped with the package (configs/ in the repository; pyproject maps it).

``lm/NAME.yaml`` are the ``corpusforge lm train --preset NAME`` presets; ``demo.yaml`` is the demo pipeline. They are
package data, so an installed wheel has them too (flows/api.py reads them with importlib.resources)."""
