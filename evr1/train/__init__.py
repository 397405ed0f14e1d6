"""evr1.train"""
