"""evr1.models"""
