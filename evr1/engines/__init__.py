"""evr1.engines"""
