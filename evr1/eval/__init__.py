"""evr1.eval"""
