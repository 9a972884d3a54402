"""The container image: a Debian base made from Debian's packages, ferrymq from this checkout
(``python3 -m deploy.image.build``, ``make image``)."""
