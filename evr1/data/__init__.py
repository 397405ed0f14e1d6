"""evr1.data"""
