"""evr1.cache"""
