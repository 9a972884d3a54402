"""ferrymq's SDK (``ferrymq.client``) against fakes and real nodes."""
