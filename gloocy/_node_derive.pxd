# Node segments of derived communicators (_node_derive.pxi). Python name:
# share_node_segment (collective over a freshly derived context).
